"""One router per resource: rescoring, perplexity, models, health and metrics."""
