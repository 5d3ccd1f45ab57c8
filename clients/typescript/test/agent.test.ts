import { test } from "node:test";
import assert from "node:assert/strict";
import { AIMessage, HumanMessage, ToolMessage } from "@langchain/core/messages";
import { fakeModel } from "@langchain/core/testing";
import { createDeepAgent } from "deepagents";
import { TetherSandbox } from "../src/deepagents.js";
import { liveClient, text } from "./helpers.js";

const client = liveClient();

test("a deep agent with a scripted model writes a file and runs a command in the sandbox", async (t) => {
  const sandbox = await TetherSandbox.create({ client, provider: "local" });
  t.after(() => sandbox.close());

  const model = fakeModel()
    .respondWithTools([{ name: "write_file", args: { file_path: "/workspace/app/hello.sh", content: "echo hi from the agent\n" }, id: "call_write" }])
    .respondWithTools([{ name: "execute", args: { command: "cd /workspace/app && sh hello.sh > out.txt && echo ran" }, id: "call_exec" }])
    .respond(new AIMessage("All done."));
  const agent = createDeepAgent({ model, backend: sandbox });
  const result = await agent.invoke({ messages: [new HumanMessage("write hello.sh and run it")] });

  const tools = result.messages.filter((m): m is ToolMessage => ToolMessage.isInstance(m));
  const byId = new Map(tools.map((m) => [m.tool_call_id, String(m.content)]));
  assert.match(byId.get("call_write") ?? "", /hello\.sh/);
  assert.match(byId.get("call_exec") ?? "", /ran/);
  assert.equal(String(result.messages.at(-1)?.content), "All done.");
  assert.equal(model.callCount, 3);

  // Verified through Tether's own files API, not through deepagents.
  assert.equal(text(await client.readFile(sandbox.id, "/workspace/app/hello.sh")), "echo hi from the agent\n");
  assert.equal(text(await client.readFile(sandbox.id, "/workspace/app/out.txt")), "hi from the agent\n");
});
