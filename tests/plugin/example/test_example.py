from openai import OpenAI


def test_my_code_against_a_live_llm_api(llmsim_server):
    client = OpenAI(base_url=llmsim_server.openai_url, api_key="sk-test")
    reply = client.responses.create(model="gpt-4o", input="Say hello.")
    assert reply.status == "completed" and reply.output_text
    chat = client.chat.completions.create(
        model="gpt-4o", messages=[{"role": "user", "content": "Say hello."}])
    assert chat.choices[0].message.content
