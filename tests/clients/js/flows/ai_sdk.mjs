// The Vercel AI SDK (ai) with @ai-sdk/openai (Responses and Chat), @ai-sdk/anthropic and
// @ai-sdk/google: generateText, streamText, a tool (with its execute), generateObject, and
// embedMany where the provider has embeddings. Flows are named PROVIDER_FLOW.
import {createAnthropic} from "@ai-sdk/anthropic";
import {createGoogleGenerativeAI} from "@ai-sdk/google";
import {createOpenAI} from "@ai-sdk/openai";
import {embedMany, generateObject, generateText, stepCountIs, streamText, tool} from "ai";
import {z} from "zod";
import {KEY, URL, check, run} from "./harness.mjs";

const openai = createOpenAI({baseURL: `${URL}/v1`, apiKey: KEY});
const anthropic = createAnthropic({baseURL: `${URL}/v1`, apiKey: KEY});
const google = createGoogleGenerativeAI({baseURL: `${URL}/v1beta`, apiKey: KEY});
const MODELS = {
  openai: () => openai("gpt-4o"),                     // the Responses API
  openai_chat: () => openai.chat("gpt-4o"),
  anthropic: () => anthropic("claude-sonnet-4-5"),
  google: () => google("gemini-2.5-flash"),
};
const City = z.object({name: z.string(), population: z.number().int()});
const weather = tool({
  description: "Get the weather in a city",
  inputSchema: z.object({city: z.string()}),
  execute: async ({city}) => `It is sunny in ${city}.`,
});

const flows = {};
for (const [name, model] of Object.entries(MODELS)) {
  flows[`${name}_generate`] = async () => {
    const {text} = await generateText({model: model(), prompt: "Hi", maxRetries: 0});
    check(text, "text");
  };
  flows[`${name}_stream`] = async () => {
    const result = streamText({model: model(), prompt: "Hi", maxRetries: 0, onError: () => {}});
    let text = "";
    for await (const part of result.textStream) text += part;
    check(text, "streamed text");
  };
  flows[`${name}_tools`] = async () => {
    const result = await generateText({model: model(), prompt: "Weather in Paris?", tools: {weather},
                                       stopWhen: stepCountIs(3), maxRetries: 0});
    const calls = result.steps.flatMap((step) => step.toolCalls);
    check(calls.length && calls[0].toolName === "weather" && result.text, "a weather call, then text");
  };
  flows[`${name}_object`] = async () => {
    const {object} = await generateObject({model: model(), schema: City, prompt: "A city", maxRetries: 0});
    check(City.safeParse(object).success, "a City");
  };
}
flows.openai_embed = async () => {
  const {embeddings} = await embedMany({model: openai.embedding("text-embedding-3-small"), values: ["one", "two"],
                                        maxRetries: 0});
  check(embeddings.length === 2 && embeddings[0].length === 1536, "two vectors");
};
await run(flows);
