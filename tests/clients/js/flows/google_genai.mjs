// @google/genai: generateContent plain and streamed, a function call (mode ANY), structured
// output (responseSchema).
import {FunctionCallingConfigMode, GoogleGenAI, Type} from "@google/genai";
import {KEY, URL, WEATHER_SCHEMA, check, run} from "./harness.mjs";

const ai = new GoogleGenAI({apiKey: KEY, httpOptions: {baseUrl: URL}});
const MODEL = "gemini-2.5-flash";

await run({
  async generate() {
    const answer = await ai.models.generateContent({model: MODEL, contents: "Hi"});
    check(answer.text && answer.usageMetadata.candidatesTokenCount > 0, "text and usage");
  },
  async generate_stream() {
    let text = "";
    for await (const chunk of await ai.models.generateContentStream({model: MODEL, contents: "Hi"})) {
      text += chunk.text ?? "";
    }
    check(text, "streamed text");
  },
  async tools() {
    const answer = await ai.models.generateContent({model: MODEL, contents: "Weather in Paris?", config: {
      tools: [{functionDeclarations: [{name: "get_weather", description: "weather", parametersJsonSchema: WEATHER_SCHEMA}]}],
      toolConfig: {functionCallingConfig: {mode: FunctionCallingConfigMode.ANY}}}});
    check(answer.functionCalls?.[0]?.name === "get_weather" && "city" in answer.functionCalls[0].args, "a call");
  },
  async structured() {
    const answer = await ai.models.generateContent({model: MODEL, contents: "A city", config: {
      responseMimeType: "application/json",
      responseSchema: {type: Type.OBJECT, properties: {name: {type: Type.STRING}, population: {type: Type.INTEGER}},
                       required: ["name", "population"]}}});
    const city = JSON.parse(answer.text);
    check(typeof city.name === "string" && Number.isInteger(city.population), "a city object");
  },
});
