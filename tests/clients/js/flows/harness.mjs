// Run one JavaScript client's flows against a live llmsim (the server's root URL in LLMSIM_URL)
// and print {flow: null (passed) or the error} as JSON on the last line of stdout.
// tests/clients/test_js_clients.py runs each flows file with node, in an environment of the
// exact versions of ../package.json.
export const URL = process.env.LLMSIM_URL ?? "http://127.0.0.1:8080";
export const KEY = "sk-llmsim-test";
export const WEATHER_SCHEMA = {type: "object", properties: {city: {type: "string"}}, required: ["city"]};

export function check(condition, what) {
  if (!condition) throw new Error(`check failed: ${what}`);
}

export async function run(flows) {
  const wanted = process.argv.slice(2).length ? process.argv.slice(2) : Object.keys(flows);
  const results = {};
  for (const name of wanted) {
    try {
      await flows[name]();
      results[name] = null;
    } catch (err) {
      results[name] = `${err?.name}: ${err?.message}\n${(err?.stack ?? "").split("\n").slice(1, 4).join("\n")}`.slice(0, 2000);
    }
  }
  console.log(JSON.stringify(results));
}
