// openai (npm): Chat Completions and Responses, plain and streamed, tools, structured
// output (zod helpers), embeddings.
import OpenAI from "openai";
import {zodResponseFormat} from "openai/helpers/zod";
import {z} from "zod";
import {KEY, URL, WEATHER_SCHEMA, check, run} from "./harness.mjs";

const client = new OpenAI({baseURL: `${URL}/v1`, apiKey: KEY, maxRetries: 0});
const HI = [{role: "user", content: "Hi"}];
const City = z.object({name: z.string(), population: z.number().int()});

await run({
  async chat() {
    const answer = await client.chat.completions.create({model: "gpt-4o", messages: HI});
    check(answer.choices[0].message.content && answer.usage.completion_tokens > 0, "text and usage");
  },
  async chat_stream() {
    let text = "";
    for await (const chunk of await client.chat.completions.create({model: "gpt-4o", messages: HI, stream: true})) {
      text += chunk.choices[0]?.delta?.content ?? "";
    }
    check(text, "streamed text");
  },
  async chat_tools() {
    const answer = await client.chat.completions.create({
      model: "gpt-4o", messages: HI, tool_choice: "required",
      tools: [{type: "function", function: {name: "get_weather", parameters: WEATHER_SCHEMA}}]});
    const call = answer.choices[0].message.tool_calls[0];
    check(call.function.name === "get_weather" && "city" in JSON.parse(call.function.arguments), "a get_weather call");
  },
  async chat_structured() {
    const answer = await client.chat.completions.parse({model: "gpt-4o", messages: HI,
                                                        response_format: zodResponseFormat(City, "city")});
    check(City.safeParse(answer.choices[0].message.parsed).success, "a parsed City");
  },
  async responses() {
    const answer = await client.responses.create({model: "gpt-4o", input: "Hi"});
    check(answer.output_text && answer.status === "completed", "output_text");
  },
  async responses_stream() {
    let text = "";
    for await (const event of await client.responses.create({model: "gpt-4o", input: "Hi", stream: true})) {
      if (event.type === "response.output_text.delta") text += event.delta;
    }
    check(text, "streamed text");
  },
  async embeddings() {
    const answer = await client.embeddings.create({model: "text-embedding-3-small", input: ["one", "two"]});
    check(answer.data.length === 2 && answer.data[0].embedding.length === 1536, "two vectors");
  },
});
