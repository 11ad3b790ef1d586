// A dynalite server (in-memory store) in its own process, started by test/support/dynalite.ts and
// bench/cloud: listens on 127.0.0.1 at a port the OS picks and prints `port <n>` once it listens.
//
// DYNALITE_RETURN_OLD=1 adds the one DynamoDB feature the conditional-write backends rely on that
// dynalite 4.0.0 lacks: a failed condition returns the item it was checked against when the request
// asks for it (ReturnValuesOnConditionCheckFailure: "ALL_OLD"), exactly as DynamoDB does. The item is
// the one dynalite's own per-key lock checked the condition on; nothing else changes.
const dynalite = require("dynalite");

if (process.env.DYNALITE_RETURN_OLD === "1") {
  for (const action of ["putItem", "updateItem", "deleteItem"]) {
    // dynalite drops request members it does not know; let this one through
    require(`dynalite/validations/${action}`).types.ReturnValuesOnConditionCheckFailure = {
      type: "String",
      enum: ["ALL_OLD", "NONE"],
    };
  }
  const db = require("dynalite/db");
  const check = db.checkConditional;
  db.checkConditional = (data, existing) => {
    const error = check(data, existing);
    if (error != null && existing && data.ReturnValuesOnConditionCheckFailure === "ALL_OLD") {
      error.body.Item = existing;
    }
    return error;
  };
}

const server = dynalite({ createTableMs: 0, deleteTableMs: 0, updateTableMs: 0 });
server.listen(0, "127.0.0.1", (error) => {
  if (error) throw error;
  process.stdout.write(`port ${server.address().port}\n`);
});
process.on("SIGTERM", () => process.exit(0));
