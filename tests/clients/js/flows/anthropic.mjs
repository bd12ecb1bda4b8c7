// @anthropic-ai/sdk: messages plain and streamed, a forced tool, the default tool runner.
import Anthropic from "@anthropic-ai/sdk";
import {KEY, URL, WEATHER_SCHEMA, check, run} from "./harness.mjs";

const client = new Anthropic({baseURL: URL, apiKey: KEY, maxRetries: 0});
const MODEL = "claude-sonnet-4-5";
const HI = [{role: "user", content: "Hi"}];
const TOOL = {name: "get_weather", description: "weather", input_schema: WEATHER_SCHEMA};

await run({
  async messages() {
    const message = await client.messages.create({model: MODEL, max_tokens: 256, messages: HI});
    check(message.content[0].text && message.usage.output_tokens > 0, "text and usage");
  },
  async messages_stream() {
    const stream = client.messages.stream({model: MODEL, max_tokens: 256, messages: HI});
    let text = "";
    stream.on("text", (delta) => { text += delta; });
    const final = await stream.finalMessage();
    check(text && final.content[0].text === text, "streamed text");
  },
  async tools() {
    const message = await client.messages.create({model: MODEL, max_tokens: 256, messages: HI, tools: [TOOL],
                                                  tool_choice: {type: "tool", name: "get_weather"}});
    const use = message.content.find((block) => block.type === "tool_use");
    check(use && use.name === "get_weather" && "city" in use.input, "a get_weather tool_use");
  },
  async tool_runner() {
    const final = await client.beta.messages.toolRunner({
      model: MODEL, max_tokens: 256, messages: [{role: "user", content: "Weather in Paris?"}],
      tools: [{...TOOL, run: async ({city}) => `It is sunny in ${city}.`}],
    });
    check(final.content.some((block) => block.type === "text"), "a final text answer");
  },
});
