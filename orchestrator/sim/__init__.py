"""A simulated SGLang-shaped GPU serving host: server, bench client and demo repo."""
