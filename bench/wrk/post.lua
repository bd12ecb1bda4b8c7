-- POST one JSON body on every request and count complete responses.
-- usage: wrk ... -s bench/wrk/post.lua URL -- BODY_FILE [END_MARKER]
-- With END_MARKER (e.g. "data: [DONE]" or "event: response.completed") each 200 response body
-- is checked to contain it, so a stream counts only if the server sent it whole; without a
-- marker no response callback is installed (wrk then skips body buffering for speed).
-- done() prints one line "PERF_JSON {...}" with the counts summed over threads.

local threads = {}

function setup(thread)
  table.insert(threads, thread)
end

function init(args)
  local f = assert(io.open(args[1], "rb"))
  wrk.body = f:read("*a")
  f:close()
  wrk.method = "POST"
  wrk.headers["Content-Type"] = "application/json"
  wrk.headers["Authorization"] = "Bearer sk-bench"
  marker = args[2]
  complete, incomplete, bad_status = 0, 0, 0
  if marker then
    response = function(status, headers, body)
      if status ~= 200 then
        bad_status = bad_status + 1
      elseif body:find(marker, 1, true) then
        complete = complete + 1
      else
        incomplete = incomplete + 1
      end
    end
  end
end

function done(summary, latency, requests)
  local c, i, b = 0, 0, 0
  for _, thread in ipairs(threads) do
    c = c + (thread:get("complete") or 0)
    i = i + (thread:get("incomplete") or 0)
    b = b + (thread:get("bad_status") or 0)
  end
  local checked = threads[1] and threads[1]:get("marker") ~= nil
  local e = summary.errors
  io.write(string.format(
    'PERF_JSON {"requests":%d,"duration_us":%d,"bytes":%d,"checked":%s,"complete":%d,' ..
    '"incomplete":%d,"bad_status":%d,"status_errors":%d,"connect_errors":%d,"read_errors":%d,' ..
    '"write_errors":%d,"timeouts":%d,"p50_us":%d,"p99_us":%d,"max_us":%d}\n',
    summary.requests, summary.duration, summary.bytes, checked and "true" or "false", c, i, b,
    e.status, e.connect, e.read, e.write, e.timeout,
    latency:percentile(50), latency:percentile(99), latency.max))
end
