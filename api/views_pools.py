"""`/api/v1/pools`: a tenant's named pools (list, create; get, resize, delete by name). Thin:
a serializer for the shape, the pool services for the writes (audited there), the selectors
for the reads (another tenant's pool is a 404)."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from api.pagination import PagePagination
from api.schema import page_of
from api.serializers_pools import PoolInput, PoolOutput, PoolUpdateInput
from api.strict import refuse_body
from api.tenancy import request_tenant
from scheduler_app.selectors.pools import pool_get, pool_list, pool_usage
from scheduler_app.services.pools import pool_create, pool_delete, pool_update


def _output(pool, tenant) -> dict:
    return PoolOutput(pool, context={"usage": pool_usage(tenant=tenant, names=[pool.name])}).data


class PoolListView(APIView):
    write_role = "admin"

    @extend_schema(responses=page_of(PoolOutput))
    def get(self, request: Request) -> Response:
        tenant = request_tenant(request)
        paginator = PagePagination()
        page = paginator.paginate_queryset(pool_list(tenant=tenant), request, view=self)
        usage = pool_usage(tenant=tenant, names=[pool.name for pool in page])
        return paginator.get_paginated_response(
            PoolOutput(page, many=True, context={"usage": usage}).data
        )

    @extend_schema(request=PoolInput, responses={201: PoolOutput})
    def post(self, request: Request) -> Response:
        tenant = request_tenant(request)
        body = PoolInput(data=request.data)
        body.is_valid(raise_exception=True)
        pool = pool_create(tenant=tenant, **body.validated_data)
        return Response(_output(pool, tenant), status=status.HTTP_201_CREATED)


class PoolDetailView(APIView):
    write_role = "admin"

    @extend_schema(responses=PoolOutput)
    def get(self, request: Request, name: str) -> Response:
        tenant = request_tenant(request)
        return Response(_output(pool_get(tenant=tenant, name=name), tenant))

    @extend_schema(request=PoolUpdateInput, responses=PoolOutput)
    def patch(self, request: Request, name: str) -> Response:
        tenant = request_tenant(request)
        pool = pool_get(tenant=tenant, name=name)
        body = PoolUpdateInput(data=request.data)
        body.is_valid(raise_exception=True)
        pool = pool_update(pool=pool, changes=body.validated_data)
        return Response(_output(pool, tenant))

    @extend_schema(responses={204: None})
    def delete(self, request: Request, name: str) -> Response:
        pool = pool_get(tenant=request_tenant(request), name=name)
        refuse_body(request)
        pool_delete(pool=pool)
        return Response(status=status.HTTP_204_NO_CONTENT)
