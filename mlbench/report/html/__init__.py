"""The HTML report: one self-contained page (`page`) with its charts (`charts`, `latency`, `memory`,
`generation`, `trend`), which variant to ship (`ship`), and every Markdown table rendered in it (`from_markdown`)."""
