"""The API docs at ``/docs`` (Swagger UI), served with every asset from this machine: a
browser with no internet gets the whole page.

FastAPI's own page loads its JavaScript and CSS from a CDN, so offline it is blank. This
page is FastAPI's, pointed at the Swagger UI files that the ``fastapi-offline`` package
ships (part of the ``server`` extra), served under ``/docs/assets/`` (no run data: public,
like the panel's files), with the panel's icon and Swagger UI's online validator off.
FastAPI's ``/redoc`` is not served: ReDoc loads its logo from the internet whatever it is
told.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from fastapi import FastAPI, HTTPException, Request
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import FileResponse, HTMLResponse, Response

ASSETS = "/docs/assets/"
FILES = {
    "swagger-ui-bundle.js": "text/javascript; charset=utf-8",
    "swagger-ui.css": "text/css; charset=utf-8",
}
"""The files served, by name, and their media types."""
ICON = "/panel/favicon.svg"
CACHE = {"Cache-Control": "public, max-age=86400"}


def is_docs_asset(path: str) -> bool:
    """Whether ``path`` is one of the docs' script or style files (served without a token)."""
    return path.startswith(ASSETS) and path[len(ASSETS) :] in FILES


def asset_dir() -> Path | None:
    """Where the Swagger UI files are, or None when fastapi-offline is missing."""
    try:
        folder = Path(str(resources.files("fastapi_offline"))) / "static"
    except ModuleNotFoundError:
        return None
    return folder if all((folder / name).is_file() for name in FILES) else None


MISSING = (
    "the API docs need the fastapi-offline package (part of the server extra): "
    "pip install fastapi-offline; the schema is at /openapi.json"
)


def add_docs_routes(app: FastAPI) -> None:
    """Serve ``/docs`` and its assets from ``app`` (made with ``docs_url=None``)."""
    folder = asset_dir()

    def root(request: Request) -> str:
        return str(request.scope.get("root_path") or "")

    @app.get("/docs", include_in_schema=False)
    async def swagger_ui(request: Request) -> Response:
        if folder is None:
            return HTMLResponse(f"<p>{MISSING}</p>", status_code=503)
        base = root(request)
        return get_swagger_ui_html(
            openapi_url=f"{base}{app.openapi_url}",
            title=f"{app.title} API",
            swagger_js_url=f"{base}{ASSETS}swagger-ui-bundle.js",
            swagger_css_url=f"{base}{ASSETS}swagger-ui.css",
            swagger_favicon_url=f"{base}{ICON}",
            swagger_ui_parameters={"validatorUrl": None},
        )

    @app.api_route(ASSETS + "{name}", methods=["GET", "HEAD"], include_in_schema=False)
    async def asset(name: str) -> Response:
        media = FILES.get(name)
        if folder is None or media is None:
            raise HTTPException(404, f"no docs file {name!r}")
        return FileResponse(folder / name, media_type=media, headers=CACHE)
