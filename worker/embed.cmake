# cmake -DIN=FILE -DOUT=FILE.c -DNAME=SYMBOL -P embed.cmake: write FILE's
# bytes as the C array SYMBOL (and SYMBOL_len), for the library to carry a
# program (the exec guard) without installing it.
file(READ "${IN}" hex HEX)
string(LENGTH "${hex}" digits)
math(EXPR len "${digits} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
string(REGEX REPLACE "(0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,)" "\\1\n    "
       bytes "${bytes}")
file(WRITE "${OUT}"
     "/* Generated from ${IN} by worker/embed.cmake: do not edit. */\n"
     "const unsigned char ${NAME}[] = {\n    ${bytes}\n};\n"
     "const unsigned long ${NAME}_len = ${len};\n")
