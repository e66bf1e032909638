// Drives @ag-ui/client's HttpAgent, unmodified, against a Gatehouse AG-UI
// endpoint. Reads a JSON plan file:
//   {"url", "headers": {...}, "threadId", "runs": [{"add": [<message>...],
//    "tools"?, "context"?, "forwardedProps"?, "state"?}, ...]}
// For each run: adds the messages to the agent (a tool result, a new user
// turn), calls agent.runAgent() and records every event the agent saw (its
// own subscriber hook), whether each parses with @ag-ui/core's EventSchemas,
// and the run's outcome. After each run it prints one JSON line
//   {"events", "schemaErrors", "newMessages", "error"}
// and, before the next, waits for a line on stdin (so the caller can change
// what the model server will answer); last it prints {"messages"}, the
// agent's messages after the last run.
import { readFileSync } from "node:fs";
import { createInterface } from "node:readline";
import { HttpAgent } from "@ag-ui/client";
import { EventSchemas } from "@ag-ui/core/schemas";

const plan = JSON.parse(readFileSync(process.argv[2], "utf8"));
const agent = new HttpAgent({ url: plan.url, headers: plan.headers, threadId: plan.threadId });
if (plan.state !== undefined) agent.setState(plan.state);

const input = createInterface({ input: process.stdin })[Symbol.asyncIterator]();
for (const [n, run] of plan.runs.entries()) {
  if (n > 0) await input.next();
  if (run.add?.length) agent.addMessages(run.add);
  const events = [];
  const out = { events, schemaErrors: [], newMessages: [], error: null };
  try {
    const result = await agent.runAgent(
      { tools: run.tools, context: run.context, forwardedProps: run.forwardedProps },
      { onEvent: ({ event }) => { events.push(event); } },
    );
    out.newMessages = result.newMessages;
  } catch (e) {
    out.error = { message: String(e?.message ?? e), status: e?.status ?? null };
  }
  for (const [i, ev] of events.entries()) {
    const r = EventSchemas.safeParse(ev);
    if (!r.success) out.schemaErrors.push(`event ${i} (${ev.type}): ${r.error.message}`);
  }
  console.log(JSON.stringify(out));
}
console.log(JSON.stringify({ messages: agent.messages }));
process.exit(0);
