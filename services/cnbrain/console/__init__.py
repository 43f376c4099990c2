"""The operator's web console: static pages (HTML, CSS and plain JavaScript drawing SVG, no
build step and nothing fetched from elsewhere) and the small read-only JSON API they read
besides a brain's REST API. `mount.mount_console` serves it on a brain's FastAPI app from a
`mount.ConsoleSource` that says what the brain knows (docs/console.md)."""
