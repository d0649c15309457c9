"""Operations: what an operator watches (metrics, traces, structured logs, health)."""
