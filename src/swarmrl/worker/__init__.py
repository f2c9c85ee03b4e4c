"""The untrusted node: fetch a policy, answer the assigned prompts, prove the inference, hand in a signed file."""
