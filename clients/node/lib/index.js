"use strict";
const { Producer } = require("./producer");
const { Worker, JobCancelledError } = require("./worker");
const { Admin, Subscriber } = require("./admin");
const errors = require("./errors");
const { readCert } = require("./common");
const proto = require("./proto");

module.exports = {
  Producer,
  Worker,
  Admin,
  Subscriber,
  JobCancelledError,
  ...errors,
  readCert,
  /** Where the wire schema was loaded from. */
  protoPath: proto.protoPath,
};
