// The official TypeScript MCP SDK's client on the gateway: initialize,
// tools/list, tools/call, an unknown tool, and DELETE of the session.
// Usage: node client.mjs <gateway /mcp URL> <API key>; prints one JSON line.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const [url, key] = process.argv.slice(2);
const transport = new StreamableHTTPClientTransport(new URL(url), {
  requestInit: { headers: { Authorization: `Bearer ${key}` } },
});
const client = new Client({ name: "gatehouse-ts-test", version: "1.0.0" });
await client.connect(transport);
const server = client.getServerVersion().name;
const { tools } = await client.listTools();
const add = await client.callTool({ name: "alpha__add", arguments: { a: 2, b: 3 } });
let unknown = "";
try {
  await client.callTool({ name: "alpha__nope", arguments: {} });
} catch (e) {
  unknown = String(e.message);
}
await transport.terminateSession();
await client.close();
console.log(JSON.stringify({ server, tools: tools.map((t) => t.name), add: add.content[0].text, unknown }));
