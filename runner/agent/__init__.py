"""The agent: the LLM seam (``llm``), the tool-calling loop (``loop``), record/replay (``cassette``)."""
