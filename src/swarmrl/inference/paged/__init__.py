"""The paged engine: block manager, scheduler, model runner and the engine that drives them."""
