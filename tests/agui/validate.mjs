// Reads a JSON file: [{"name": "...", "events": [<AG-UI event>, ...]}, ...].
// Each event must parse with @ag-ui/core's EventSchemas; each run's sequence
// must pass @ag-ui/client's verifyEvents. Prints one line per run and exits 1
// on the first failure.
import { readFileSync } from "node:fs";
import { EventSchemas } from "@ag-ui/core/schemas";
import { verifyEvents } from "@ag-ui/client";
import { from, lastValueFrom, toArray } from "rxjs";

const runs = JSON.parse(readFileSync(process.argv[2], "utf8"));
let failed = 0;
for (const run of runs) {
  try {
    for (const [i, ev] of run.events.entries()) {
      const r = EventSchemas.safeParse(ev);
      if (!r.success) throw new Error(`event ${i} (${ev.type}) fails the schema: ${r.error.message}`);
    }
    const seen = await lastValueFrom(from(run.events).pipe(verifyEvents(false), toArray()));
    if (seen.length !== run.events.length) throw new Error(`verifier passed ${seen.length} of ${run.events.length}`);
    console.log(`ok ${run.name}: ${run.events.length} events`);
  } catch (e) {
    failed++;
    console.log(`FAIL ${run.name}: ${e.message}`);
  }
}
console.log(`${runs.length - failed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
