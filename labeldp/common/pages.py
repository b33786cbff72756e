"""One way to page every list of both APIs.

``?limit=&offset=`` on the request; ``{"items", "next_offset", "next"}`` in the answer, where ``next`` is
the next page's path and query (null on the last page), so a client follows links without building
URLs. Lists are ordered by creation time (then ID), so offsets stay meaningful while rows are added.
The database returns one row beyond the page: that row says whether another page follows, without a
``COUNT``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Generic, TypeVar
from urllib.parse import urlencode

from fastapi import Depends, Query, Request
from pydantic import BaseModel, Field
from sqlalchemy import Select

MAX_PAGE = 1000
MAX_OFFSET = 2**31 - 1  # far beyond any list; keeps the value a database integer
DEFAULT_PAGE = 100

Item = TypeVar("Item")
Row = TypeVar("Row")


@dataclass(frozen=True)
class PageRequest:
    limit: int = DEFAULT_PAGE
    offset: int = 0

    def window(self, statement: Select[Row]) -> Select[Row]:
        """The page's rows and one more (which says whether another page follows)."""
        return statement.offset(self.offset).limit(self.limit + 1)


async def page_request(
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE, description="items per page")] = DEFAULT_PAGE,
    offset: Annotated[int, Query(ge=0, le=MAX_OFFSET, description="items to skip (see `next`)")] = 0,
) -> PageRequest:
    return PageRequest(limit, offset)


Paging = Annotated[PageRequest, Depends(page_request)]


class Page(BaseModel, Generic[Item]):
    """A page of a list, oldest first."""

    items: list[Item]
    next_offset: int | None = Field(description="`offset` of the next page; null on the last page")
    next: str | None = Field(
        description="path and query of the next page; null on the last page",
        examples=["/v1/ledger?limit=100&offset=100"],
    )

    @classmethod
    def of(
        cls, rows: Sequence[Any], paging: PageRequest, request: Request, convert: Callable[[Any], Item]
    ) -> Page[Item]:
        """A window's rows (``PageRequest.window``) as a page: a row beyond the page means more follow."""
        items = [convert(r) for r in rows[: paging.limit]]
        if len(rows) <= paging.limit:
            return cls(items=items, next_offset=None, next=None)
        offset = paging.offset + paging.limit
        query = urlencode({**request.query_params, "limit": paging.limit, "offset": offset})
        return cls(items=items, next_offset=offset, next=f"{request.url.path}?{query}")
