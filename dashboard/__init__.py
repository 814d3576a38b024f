"""Server-rendered operator dashboard (session login, tenant-scoped, polled live fragments)."""
