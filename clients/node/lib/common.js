"use strict";
// What every client shares: broker endpoint lists, CURVE certificates, jitter.
const fs = require("node:fs");
const crypto = require("node:crypto");
const { ConfigError } = require("./errors");

const EPLIST_MAX = 64;
const EP_MAX_LEN = 255;
const EP_RE = /^(tcp|ipc|inproc|ws|wss|tipc|vmci):\/\/.+/;

/**
 * The broker endpoints a client was given (a comma-separated string or an
 * array) and the one it uses now, as common/eplist.c: one at a time, the
 * next round robin when one is silent, the leader a standby names on
 * NOT_LEADER (preferring one of the list).
 */
class EndpointList {
  constructor(spec, fallback) {
    let list = spec ?? fallback;
    if (typeof list === "string") list = list.split(",");
    if (!Array.isArray(list)) throw new ConfigError("endpoints: a comma-separated string or an array");
    list = list.map((e) => String(e).trim());
    if (list.length === 0 || list.length > EPLIST_MAX)
      throw new ConfigError(`endpoints: 1 to ${EPLIST_MAX} brokers, got ${list.length}`);
    for (const e of list) {
      if (!e) throw new ConfigError("endpoints: an empty entry in the broker list");
      if (e.length > EP_MAX_LEN) throw new ConfigError(`endpoints: '${e.slice(0, 40)}...' is too long`);
      if (!EP_RE.test(e)) throw new ConfigError(`endpoints: '${e}' is not a ZeroMQ endpoint`);
    }
    this.list = list;
    this.index = 0; // the entry used last
    this.foreign = null; // a leader's endpoint from outside the list, in use
  }
  get size() {
    return this.list.length;
  }
  current() {
    return this.foreign ?? this.list[this.index];
  }
  text() {
    return this.list.join(", ");
  }
  /** True if there is somewhere else to go. */
  roams() {
    return this.list.length > 1 || this.foreign !== null;
  }
  next() {
    if (this.foreign !== null) this.foreign = null;
    this.index = (this.index + 1) % this.list.length;
    return this.current();
  }
  /** Follow a NOT_LEADER's leader_endpoints; true if it moved to a named one. */
  follow(named) {
    const good = (named || []).filter((e) => e && e.length <= EP_MAX_LEN && EP_RE.test(e));
    for (const e of good) {
      const i = this.list.indexOf(e);
      if (i >= 0) {
        this.foreign = null;
        this.index = i;
        return true;
      }
    }
    if (good.length) {
      this.foreign = good[0];
      return true;
    }
    this.next();
    return false;
  }
}

/**
 * Read a czmq certificate file (as `zlane-ctl keygen` writes: a zconfig text
 * with a `curve` section holding `public-key` and, in the _secret file,
 * `secret-key`, each 40 characters of Z85). Returns {publicKey, secretKey, metadata}.
 */
function readCert(file) {
  let text;
  try {
    text = fs.readFileSync(file, "utf8");
  } catch (e) {
    throw new ConfigError(`cannot read the certificate ${file}: ${e.message}`);
  }
  const out = { publicKey: "", secretKey: "", metadata: {} };
  let section = null;
  for (const raw of text.split("\n")) {
    const line = raw.replace(/\r$/, "");
    const t = line.trim();
    if (!t || t.startsWith("#")) continue;
    const indent = line.length - line.trimStart().length;
    const m = /^([A-Za-z0-9_.\-/*]+)\s*(?:=\s*(.*))?$/.exec(t);
    if (!m) continue;
    if (indent === 0) {
      section = m[1];
      continue;
    }
    let value = (m[2] ?? "").trim();
    if (value.startsWith('"') || value.startsWith("'")) {
      const q = value[0];
      const end = value.indexOf(q, 1);
      value = end > 0 ? value.slice(1, end) : value.slice(1);
    } else value = value.replace(/\s+#.*$/, "");
    if (section === "curve" && m[1] === "public-key") out.publicKey = value;
    else if (section === "curve" && m[1] === "secret-key") out.secretKey = value;
    else if (section === "metadata") out.metadata[m[1]] = value;
  }
  if (out.publicKey.length !== 40)
    throw new ConfigError(`${file} is not a CURVE certificate (no 40-character public-key)`);
  return out;
}

/**
 * CURVE options for a client socket from {serverCert, clientCert} (file
 * paths: the broker's public certificate and this client's _secret
 * certificate) or {serverKey, publicKey, secretKey} (Z85 text). One server key
 * serves every broker of the list: brokers of one deployment share it.
 * Returns socket options, {} for plaintext.
 */
function curveOptions(curve) {
  if (!curve) return {};
  let serverKey = curve.serverKey;
  let publicKey = curve.publicKey;
  let secretKey = curve.secretKey;
  if (curve.serverCert) serverKey = readCert(curve.serverCert).publicKey;
  if (curve.clientCert) {
    const me = readCert(curve.clientCert);
    publicKey = me.publicKey;
    secretKey = me.secretKey;
    if (!secretKey || /^0+$/.test(secretKey))
      throw new ConfigError(`${curve.clientCert} holds no secret key: give the _secret file`);
  }
  if (!serverKey || !publicKey || !secretKey)
    throw new ConfigError(
      "CURVE needs both the broker's public certificate and this client's secret certificate",
    );
  for (const [n, k] of [["server", serverKey], ["public", publicKey], ["secret", secretKey]])
    if (k.length !== 40) throw new ConfigError(`CURVE ${n} key is not 40 characters of Z85`);
  return { curveServerKey: serverKey, curvePublicKey: publicKey, curveSecretKey: secretKey };
}

/** A uniformly random integer in [0, bound]: full jitter. */
function jitter(bound) {
  return Math.floor(Math.random() * (bound + 1));
}

/** 16 hex characters, random: this instance's name in generated keys. */
function instanceHex() {
  return crypto.randomBytes(8).toString("hex");
}

/** `text` as valid UTF-8 without NUL bytes, cut between characters to at most `max` bytes. */
function sanitizeText(text, max = 1023) {
  let s = String(text ?? "").replace(/\0/g, "\uFFFD");
  // lone surrogates become U+FFFD when encoded
  let buf = Buffer.from(s, "utf8");
  if (buf.length <= max) return buf.toString("utf8");
  let end = max;
  while (end > 0 && (buf[end] & 0xc0) === 0x80) end--;
  return buf.subarray(0, end).toString("utf8");
}

module.exports = { EndpointList, readCert, curveOptions, jitter, instanceHex, sanitizeText };
