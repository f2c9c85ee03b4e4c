"""The coordinator's HTTP service: the FastAPI app, its routers, who is calling, and the reads dashboards use."""
