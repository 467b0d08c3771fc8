"use strict";
// The test harness: real zlane binaries (build/bin, or $ZLANE_BIN_DIR) as
// separate processes on 127.0.0.1 ephemeral ports, stopped by PID. Every wait
// polls a condition against a deadline; nothing sleeps in place of a check.
const fs = require("node:fs");
const os = require("node:os");
const path = require("node:path");
const { spawn, execFileSync } = require("node:child_process");

const BIN = process.env.ZLANE_BIN_DIR || path.resolve(__dirname, "..", "..", "..", "build", "bin");
const NODE_DIR = path.resolve(__dirname, "..");
const children = new Set();
const dirs = new Set();

process.on("exit", () => {
  for (const c of children) {
    try {
      process.kill(c.pid, "SIGKILL");
    } catch {}
  }
  if (!process.env.ZLT_KEEP) for (const d of dirs) fs.rmSync(d, { recursive: true, force: true });
});

function bin(name) {
  const p = path.join(BIN, name);
  if (!fs.existsSync(p)) throw new Error(`${p} is missing: build zlane first (cmake --build build)`);
  return p;
}

function tmpdir(tag = "node") {
  const d = fs.mkdtempSync(path.join(os.tmpdir(), `zlane-${tag}-`));
  dirs.add(d);
  return d;
}

/** Poll `cond` (sync or async) every `everyMs` until it returns truthy; throw after `timeoutMs`. */
async function waitFor(cond, timeoutMs, what = "condition", everyMs = 20) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await cond();
    if (v) return v;
    if (Date.now() >= deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, everyMs));
  }
}

/** Spawn a process (own process group); stderr to `errPath`. Returns the ChildProcess with .exited promise. */
function run(cmd, args, { errPath, outPath, env } = {}) {
  const err = errPath ? fs.openSync(errPath, "a") : "ignore";
  const out = outPath ? fs.openSync(outPath, "a") : "ignore";
  const child = spawn(cmd, args, { stdio: ["ignore", out, err], detached: true, env: { ...process.env, ...env } });
  if (typeof err === "number") fs.closeSync(err);
  if (typeof out === "number") fs.closeSync(out);
  children.add(child);
  child.exited = new Promise((resolve) =>
    child.on("exit", (code, signal) => {
      children.delete(child);
      child.exitCode_ = code;
      child.signal_ = signal;
      resolve({ code, signal });
    }),
  );
  return child;
}

async function stopChild(child, signal = "SIGTERM", timeoutMs = 10000) {
  if (!child || child.exitCode !== null || child.signalCode !== null) return child?.exited;
  try {
    process.kill(child.pid, signal);
  } catch {}
  const t = setTimeout(() => {
    try {
      process.kill(-child.pid, "SIGKILL");
    } catch {}
  }, timeoutMs);
  const r = await child.exited;
  clearTimeout(t);
  return r;
}

function readPorts(file) {
  let text;
  try {
    text = fs.readFileSync(file, "utf8");
  } catch {
    return null;
  }
  const eps = {};
  for (const line of text.split("\n")) {
    const i = line.indexOf("=");
    if (i > 0) eps[line.slice(0, i)] = line.slice(i + 1);
  }
  return eps.frontend && eps.backend && eps.events && eps.admin ? eps : null;
}

/**
 * A real zlane-broker with every endpoint on tcp://127.0.0.1:* (or the
 * endpoints of its last start, on restart), --ports-file and --data in a
 * fresh directory, then `args`.
 */
class Broker {
  constructor(args = ["--lane", "a", "--lane", "b"]) {
    this.args = args;
    this.dir = tmpdir("broker");
    this.errPath = path.join(this.dir, "broker.err");
    this.eps = null;
    this.proc = null;
  }

  async start(timeoutMs = 10000) {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const ports = path.join(this.dir, "ports");
      fs.rmSync(ports, { force: true });
      const names = ["frontend", "backend", "events", "admin"];
      const argv = [];
      for (const n of names) argv.push(`--${n}`, this.eps ? this.eps[n] : "tcp://127.0.0.1:*");
      argv.push("--ports-file", ports, "--data", path.join(this.dir, "data"), ...this.args);
      const from = fs.existsSync(this.errPath) ? fs.statSync(this.errPath).size : 0;
      this.proc = run(bin("zlane-broker"), argv, { errPath: this.errPath });
      let up = null;
      let exited = false;
      this.proc.exited.then(() => (exited = true));
      await waitFor(() => (up = readPorts(ports)) || exited || Date.now() >= deadline, timeoutMs + 1000, "the ports file");
      if (up) {
        this.eps = up;
        return this;
      }
      const said = fs.readFileSync(this.errPath, "utf8").slice(from);
      // a restart on the old ports: one may not be free yet
      if (exited && /cannot bind/.test(said) && Date.now() < deadline) {
        await new Promise((r) => setTimeout(r, 50));
        continue;
      }
      await stopChild(this.proc, "SIGKILL");
      throw new Error(`zlane-broker did not start:\n${said.slice(-3000)}`);
    }
  }

  get frontend() {
    return this.eps.frontend;
  }
  get backend() {
    return this.eps.backend;
  }
  get events() {
    return this.eps.events;
  }
  get admin() {
    return this.eps.admin;
  }

  /** SIGKILL, as a crash would. */
  async kill() {
    await stopChild(this.proc, "SIGKILL");
  }
  async stop() {
    return stopChild(this.proc, "SIGTERM");
  }
  /** Start again on the same data and the same endpoints. */
  async restart(timeoutMs = 10000) {
    await this.kill();
    return this.start(timeoutMs);
  }
  log() {
    try {
      return fs.readFileSync(this.errPath, "utf8");
    } catch {
      return "";
    }
  }
}

/** zlane-ctl keygen NAME [args] in `dir`; returns {public, secret} paths. */
function keygen(dir, name, ...args) {
  execFileSync(bin("zlane-ctl"), ["keygen", name, "--dir", dir, ...args], { stdio: "ignore" });
  return { public: path.join(dir, name), secret: path.join(dir, `${name}_secret`) };
}

module.exports = { BIN, NODE_DIR, bin, tmpdir, waitFor, run, stopChild, Broker, keygen };
