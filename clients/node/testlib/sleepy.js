"use strict";
// A handler module for zlane-node-worker in the tests: sleeps the payload's
// milliseconds, writing "start ID" and "end ID" lines to $ZLANE_TEST_RECORD.
const fs = require("node:fs");
module.exports = async (job) => {
  const rec = process.env.ZLANE_TEST_RECORD;
  if (rec) fs.appendFileSync(rec, `start ${job.id} ${job.attempt}\n`);
  await new Promise((r) => setTimeout(r, Number(job.text()) || 0));
  if (rec) fs.appendFileSync(rec, `end ${job.id} ${job.attempt}\n`);
};
