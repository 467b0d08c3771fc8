"use strict";
// A handler module for zlane-node-worker in the tests: attempt 1 hangs (for
// the payload's milliseconds, until the process is killed), later attempts
// return at once. Writes "start ID ATTEMPT" and "end ID ATTEMPT" lines to
// $ZLANE_TEST_RECORD.
const fs = require("node:fs");
module.exports = async (job) => {
  const rec = process.env.ZLANE_TEST_RECORD;
  if (rec) fs.appendFileSync(rec, `start ${job.id} ${job.attempt}\n`);
  if (job.attempt === 1) await new Promise((r) => setTimeout(r, Number(job.text()) || 30000));
  if (rec) fs.appendFileSync(rec, `end ${job.id} ${job.attempt}\n`);
};
