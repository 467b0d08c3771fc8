#!/usr/bin/env node
"use strict";
// zlane-web: the operators' dashboard (README, "The web dashboard").
const fs = require("node:fs");
const net = require("node:net");
const { Dashboard, splitListen } = require("../lib/server");

const USAGE = `Usage: zlane-web [OPTIONS]

  --admin EP[,EP...]     the broker's admin socket(s) [tcp://127.0.0.1:5573]
  --events EP[,EP...]    its events socket(s), for live dead letters, or 'none'
                         [tcp://127.0.0.1:5572]
  --listen HOST:PORT     where the page is served [127.0.0.1:8090]
  --refresh DUR          how often the broker is asked for its figures [2s]
  --history DUR          how much of them the charts keep [1h]
  --password-file FILE   the operators' password (first line); also
                         $ZLANE_WEB_PASSWORD. Without it (or a token) the
                         dashboard is read-only.
  --token-file FILE      a token for scripts (Authorization: Bearer TOKEN);
                         also $ZLANE_WEB_TOKEN
  --read-only            no actions at all, whatever is configured
  --curve-server FILE --cert FILE
                         the broker's public certificate and this client's
                         secret one, when the broker runs CURVE (an admin key
                         for actions, a subscriber key for a read-only board)
  --secure-cookies       mark the session cookie Secure (behind an HTTPS proxy)
  --public-host NAME[,NAME...]
                         the host names browsers reach it by (behind a proxy);
                         any other Host header is refused (421), and on
                         loopback only loopback names are taken
  --insecure             allow a --listen address off loopback (plain HTTP:
                         put a TLS proxy in front)
  --url-file FILE        write the URL served once listening
  -c, --config FILE      KEY = VALUE lines, the long options' names without
                         '--' (admin, events, listen, refresh, history,
                         password_file, token_file, read_only, curve_server,
                         cert, secure_cookies, insecure)
  -h, --help
`;

function die(msg) {
  process.stderr.write(`zlane-web: ${msg}\n`);
  process.exit(2);
}

function duration(text, what) {
  const m = String(text).trim().match(/^(\d+(?:\.\d+)?)(ms|s|m|h)?$/);
  if (!m) die(`${what}: '${text}' is not a duration (500ms, 2s, 5m, 1h)`);
  const mult = { ms: 1, s: 1000, m: 60000, h: 3600000 }[m[2] || "s"];
  return Math.round(Number(m[1]) * mult);
}

function readSecret(file, what) {
  try {
    const s = fs.readFileSync(file, "utf8").split("\n")[0].trim();
    if (!s) die(`${what} ${file} is empty`);
    return s;
  } catch (e) {
    die(`cannot read ${what} ${file}: ${e.message}`);
  }
}

const FLAGS = new Set(["read_only", "secure_cookies", "insecure"]);
const KEYS = new Set(["admin", "events", "listen", "refresh", "history", "password_file", "token_file", "curve_server", "cert", "url_file", "public_host", ...FLAGS]);

function parse(argv) {
  const o = {};
  const set = (key, value, where) => {
    if (!KEYS.has(key)) die(`${where}: unknown option '${key}'`);
    o[key] = FLAGS.has(key) ? value === undefined || /^(1|true|yes|on)$/i.test(value) : value;
  };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === "-h" || a === "--help") {
      process.stdout.write(USAGE);
      process.exit(0);
    }
    if (a === "-c" || a === "--config") {
      const file = argv[++i];
      if (!file) die(`${a} needs a file`);
      let text;
      try {
        text = fs.readFileSync(file, "utf8");
      } catch (e) {
        die(`cannot read ${file}: ${e.message}`);
      }
      text.split("\n").forEach((line, n) => {
        const t = line.replace(/#.*/, "").trim();
        if (!t) return;
        const eq = t.indexOf("=");
        if (eq < 0) die(`${file}:${n + 1}: want KEY = VALUE`);
        set(t.slice(0, eq).trim().replace(/-/g, "_"), t.slice(eq + 1).trim(), `${file}:${n + 1}`);
      });
      continue;
    }
    if (!a.startsWith("--")) die(`unexpected argument '${a}' (see --help)`);
    let key = a.slice(2);
    let value;
    const eq = key.indexOf("=");
    if (eq >= 0) [key, value] = [key.slice(0, eq), key.slice(eq + 1)];
    key = key.replace(/-/g, "_");
    if (!FLAGS.has(key) && value === undefined) {
      value = argv[++i];
      if (value === undefined) die(`--${key.replace(/_/g, "-")} needs a value`);
    }
    set(key, value, "command line");
  }
  return o;
}

async function main() {
  const o = parse(process.argv.slice(2));
  const listen = o.listen || "127.0.0.1:8090";
  const [host] = splitListen(listen);
  const loopback = host === "localhost" || (net.isIP(host) === 4 ? host.startsWith("127.") : host === "::1");
  if (!loopback && !o.insecure)
    die(`--listen ${listen} is off loopback and the page is plain HTTP: pass --insecure (and put a TLS proxy in front)`);
  if ((o.curve_server && !o.cert) || (!o.curve_server && o.cert)) die("CURVE needs both --curve-server and --cert");
  const password = o.password_file ? readSecret(o.password_file, "password file") : process.env.ZLANE_WEB_PASSWORD || "";
  const token = o.token_file ? readSecret(o.token_file, "token file") : process.env.ZLANE_WEB_TOKEN || "";
  const events = o.events === "none" ? null : (o.events || "tcp://127.0.0.1:5572").split(",");
  const d = new Dashboard({
    admin: (o.admin || "tcp://127.0.0.1:5573").split(","),
    events,
    curve: o.curve_server ? { serverCert: o.curve_server, clientCert: o.cert } : undefined,
    listen,
    refreshMs: o.refresh ? duration(o.refresh, "--refresh") : 2000,
    historyMs: o.history ? duration(o.history, "--history") : 3600000,
    password,
    token,
    readOnly: !!o.read_only,
    secureCookies: !!o.secure_cookies,
    publicHosts: o.public_host ? o.public_host.split(",").map((h) => h.trim()).filter(Boolean) : [],
  });
  let url;
  try {
    url = await d.start();
  } catch (e) {
    die(`cannot serve on ${listen}: ${e.message}`);
  }
  process.stderr.write(
    `zlane-web: serving ${url} for the broker at ${(o.admin || "tcp://127.0.0.1:5573")}; actions ${d.actionsOn ? "need a login" : "off (read-only)"}\n`,
  );
  if (d.latest?.error) process.stderr.write(`zlane-web: the broker did not answer yet: ${d.latest.error}\n`);
  if (o.url_file) fs.writeFileSync(o.url_file, url + "\n");
  let stopping = false;
  const stop = async () => {
    if (stopping) return;
    stopping = true;
    await d.close();
    process.exit(0);
  };
  process.on("SIGTERM", stop);
  process.on("SIGINT", stop);
}

main().catch((e) => die(e.stack || String(e)));
