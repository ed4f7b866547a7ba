"""The console's log-in (ADR 25): a key id and secret buy the same JWT ``POST /api/token``
issues, kept in an HttpOnly, SameSite=Strict cookie (scripts cannot read it, other sites'
pages cannot make the browser send it). ``require`` sends unauthenticated console pages here
with ``?next=`` their own path; ``next`` must be a console path, never another site."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Form, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from es_sched.api.auth import COOKIE, Unauthenticated, authenticator, peer
from es_sched.api.services import Services, services
from es_sched.api.throttle import TooManyAttempts
from es_sched.api.ui.render import templates

router = APIRouter(prefix="/ui", include_in_schema=False)


def _local(next_: str) -> str:
    """``next_`` if it is a console path on this server, else the console's home."""
    ok = next_.startswith("/ui/") and not next_.startswith("//") and "\\" not in next_
    return next_ if ok and not next_.startswith("/ui/login") else "/ui/"


@router.get("/login", response_class=HTMLResponse)
def login_page(request: Request, next: str = "/ui/") -> Response:
    return templates.TemplateResponse(request, "login.html", {"next": _local(next), "error": None})


@router.post("/login", response_class=HTMLResponse)
def login(
    request: Request,
    key_id: Annotated[str, Form(alias="keyId", max_length=100)],
    key_secret: Annotated[str, Form(alias="keySecret", max_length=200)],
    next_: Annotated[str, Form(alias="next", max_length=2000)] = "/ui/",
    svc: Services = Depends(services),  # noqa: B008
) -> Response:
    target = _local(next_)
    if svc.settings.api.auth == "off":
        return RedirectResponse(target, status_code=303)
    try:
        token = authenticator(svc).log_in(key_id, key_secret, peer(request))
    except (Unauthenticated, TooManyAttempts) as exc:
        context = {"next": target, "error": f"Not logged in: {exc.message}."}
        page = templates.TemplateResponse(request, "login.html", context, exc.status)
        page.headers.update(exc.headers)
        return page
    answer = RedirectResponse(target, status_code=303)
    answer.set_cookie(
        COOKIE,
        token,
        max_age=svc.settings.api.token_ttl_s,
        path="/",
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )
    return answer


@router.post("/logout")
def logout() -> Response:
    answer = RedirectResponse("/ui/login", status_code=303)
    answer.delete_cookie(COOKIE, path="/", httponly=True, samesite="strict")
    return answer
