"""What cells read besides the matrix: exact-length prompts from the text corpus, agentic
scenarios, category questions (``prompts``) and the embedded model built locally at first use
(``tinymodel``). Imports nothing of the package; no pytest."""
