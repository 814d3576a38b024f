from rest_framework.pagination import CursorPagination, PageNumberPagination


class PagePagination(PageNumberPagination):
    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 500


class ExecutionCursorPagination(CursorPagination):
    """Stable under inserts: new fires never shift the page a client is reading."""

    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 500
    ordering = ("-scheduled_at", "-attempt")
