"""What the runtime shows of itself: the live graph, the latency figures in it, and what one client is sent."""
