#!/usr/bin/env node
// prepack: ship a copy of the one schema, ../../proto/zlane.proto, in the
// package tarball (proto/zlane.proto), so that an installed package finds it
// without the zlane source tree. In the repository the package reads the
// original directly (lib/proto.js looks there first); the copy is not tracked.
"use strict";
const fs = require("node:fs");
const path = require("node:path");

const src = path.resolve(__dirname, "..", "..", "..", "proto", "zlane.proto");
const dst = path.resolve(__dirname, "..", "proto", "zlane.proto");
fs.mkdirSync(path.dirname(dst), { recursive: true });
fs.copyFileSync(src, dst);
console.log(`copied ${src} -> ${dst}`);
