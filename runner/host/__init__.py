"""This process and its operating system: processes and their trees, the secrets it holds in
memory, the TLS context of every outbound request."""
