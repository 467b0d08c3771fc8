"use strict";
// The wire schema, loaded at run time from proto/zlane.proto: nothing here
// re-declares a message. Where the file is looked for, first found wins:
//   1. $ZLANE_PROTO (a path to zlane.proto);
//   2. the zlane source tree this package sits in (clients/node ->
//      ../../proto/zlane.proto), so that the repository's one copy is used;
//   3. the copy the package ships (proto/zlane.proto, made by `npm pack`'s
//      prepack script), for a package installed from a tarball.
const fs = require("node:fs");
const path = require("node:path");
const protobuf = require("protobufjs");
const Long = require("long");

protobuf.util.Long = Long;
protobuf.configure();

function findProto() {
  const candidates = [];
  if (process.env.ZLANE_PROTO) candidates.push(process.env.ZLANE_PROTO);
  candidates.push(path.resolve(__dirname, "..", "..", "..", "proto", "zlane.proto"));
  candidates.push(path.resolve(__dirname, "..", "proto", "zlane.proto"));
  for (const p of candidates) if (fs.existsSync(p)) return p;
  throw new Error(
    `zlane: cannot find zlane.proto (looked in ${candidates.join(", ")}); set ZLANE_PROTO`,
  );
}

const protoPath = findProto();
// keepCase: the field names are the proto's own (job_id, retry_after_ms)
const root = new protobuf.Root().loadSync(protoPath, { keepCase: true }).resolveAll();
const ns = "zlane.v1.";
const T = (name) => root.lookupType(ns + name);
const E = (name) => root.lookupEnum(ns + name);

const Envelope = T("Envelope");
const PROTOCOL_VERSION = 1;

/** Encode an Envelope whose body is `kind` (a oneof field name) = `body`. */
function encode(kind, body) {
  // on Node the writer is a BufferWriter: finish() hands back a Buffer, no copy needed
  const out = Envelope.encode({ version: PROTOCOL_VERSION, [kind]: body }).finish();
  return Buffer.isBuffer(out) ? out : Buffer.from(out.buffer, out.byteOffset, out.byteLength);
}

/** Decode one frame into {kind, body, version}; throws on a bad frame. */
function decode(buf) {
  const env = Envelope.decode(buf);
  const kind = env.body; // the oneof's virtual field: the name of the set member
  return { kind, body: kind ? env[kind] : undefined, version: env.version };
}

// 64-bit values. The wire's uint64/fixed64 decode to Long (unsigned). Job ids
// and lease tokens are exposed as decimal strings; counts and times as Numbers.
const TWO32 = 4294967296;
const SAFE_HIGH = 0x200000; // high words below this: the value is below 2^53, exact in a Number
function u64String(v) {
  if (v === undefined || v === null) return "0";
  if (typeof v === "object" && typeof v.low === "number") {
    // a Long from the decoder: its two halves, without Long's division loop
    const lo = v.low >>> 0;
    const hi = v.high >>> 0;
    if (hi < SAFE_HIGH) return String(hi * TWO32 + lo);
    return ((BigInt(hi) << 32n) | BigInt(lo)).toString();
  }
  if (typeof v === "string") return v;
  if (typeof v === "bigint") return v.toString();
  if (typeof v === "number") return String(v);
  return Long.fromValue(v).toUnsigned().toString();
}
function u64Number(v) {
  if (v === undefined || v === null) return 0;
  if (typeof v === "number") return v;
  if (typeof v === "object" && typeof v.low === "number") return (v.high >>> 0) * TWO32 + (v.low >>> 0);
  if (typeof v === "string" || typeof v === "bigint") return Number(v);
  return Long.fromValue(v).toUnsigned().toNumber();
}
/** A value the encoder takes for a 64-bit field, from a string, BigInt, number or Long. */
function u64(v) {
  if (v === undefined || v === null) return Long.UZERO;
  if (Long.isLong(v)) return v;
  if (typeof v === "bigint") v = v.toString();
  if (typeof v === "number") return Long.fromNumber(v, true);
  if (typeof v === "string") {
    if (!/^\d+$/.test(v)) throw new TypeError(`not an unsigned 64-bit integer: '${v}'`);
    return Long.fromString(v, true);
  }
  throw new TypeError(`not an unsigned 64-bit integer: ${v}`);
}

/** An internal map key for a (job id, lease token) pair of Longs: exact, and cheap to make. */
function leaseKey(jobId, lease) {
  return `${jobId.low}:${jobId.high}:${lease.low}:${lease.high}`;
}

const LONG_TYPES = new Set(["int64", "uint64", "sint64", "fixed64", "sfixed64"]);
// 64-bit fields that name things (ids, tokens) and so stay exact, as strings
const ID_FIELDS = new Set(["job_id", "after_id", "ids", "lease", "instance", "failed", "failed_parent", "parents", "children"]);
const camel = (s) => s.replace(/_([a-z])/g, (_, c) => c.toUpperCase());

/**
 * Turn a decoded message into a plain object by its reflection type:
 * camelCase names, enums as their names, ids as decimal strings, other
 * 64-bit numbers as Numbers, bytes as Buffers, defaults filled in.
 */
function plain(type, msg) {
  const out = {};
  for (const f of type.fieldsArray) {
    const v = msg ? msg[f.name] : undefined;
    let conv;
    const one = (x) => {
      if (f.resolvedType instanceof protobuf.Type) return plain(f.resolvedType, x);
      if (f.resolvedType instanceof protobuf.Enum) {
        const n = f.resolvedType.valuesById[x ?? 0];
        return n === undefined ? x : n;
      }
      if (LONG_TYPES.has(f.type)) return ID_FIELDS.has(f.name) ? u64String(x) : u64Number(x);
      if (f.type === "bytes") return x ? Buffer.from(x) : Buffer.alloc(0);
      if (x === undefined || x === null) return f.type === "string" ? "" : f.type === "bool" ? false : 0;
      return x;
    };
    if (f.repeated) conv = (v || []).map(one);
    else if (f.partOf && (v === undefined || v === null)) continue; // an unset oneof member
    else if (f.resolvedType instanceof protobuf.Type && !v) conv = null;
    else conv = one(v);
    out[camel(f.name)] = conv;
  }
  return out;
}

module.exports = {
  root,
  protoPath,
  Long,
  T,
  E,
  Envelope,
  PROTOCOL_VERSION,
  encode,
  decode,
  plain,
  u64,
  u64String,
  u64Number,
  leaseKey,
  RejectCode: E("RejectCode").values,
  RejectCodeName: E("RejectCode").valuesById,
  ErrorCode: E("ErrorCode").values,
  ErrorCodeName: E("ErrorCode").valuesById,
  CancelOutcomeName: E("CancelOutcome").valuesById,
  FailureClass: E("FailureClass").values,
};
