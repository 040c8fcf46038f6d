"""Training from logged episodes: token-exact logs read back (``logs``), DPO pairs from them
(``dpo``), implicit Q-learning over turns (``iql``), the ``agentrl offline`` run (``train``)
and Hugging Face ``datasets`` exports (``dataset``)."""
