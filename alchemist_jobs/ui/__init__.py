"""`alchemist ui`: the web dashboard and the JSON API under /api/v1 that it is built on.

Nothing here is imported by a local run or by other commands; FastAPI and uvicorn are loaded
only when the dashboard starts (the `ui` extra).
"""
