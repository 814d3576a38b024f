"""Thin views of /api/v1/channels: a tenant's notification channels, and a test send."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from alerting import selectors as alerting_selectors
from alerting.services import channels
from api.pagination import PagePagination
from api.schema import page_of
from api.serializers_channels import (
    ChannelFieldsInput,
    ChannelInput,
    ChannelOutput,
    ChannelTestInput,
    ChannelTestOutput,
)
from api.strict import body_note
from api.tenancy import request_tenant


class ChannelListView(APIView):
    read_role = "admin"
    write_role = "admin"

    @extend_schema(responses=page_of(ChannelOutput))
    def get(self, request: Request) -> Response:
        paginator = PagePagination()
        queryset = alerting_selectors.channel_list(tenant=request_tenant(request))
        page = paginator.paginate_queryset(queryset, request, view=self)
        return paginator.get_paginated_response(ChannelOutput(page, many=True).data)

    @extend_schema(request=ChannelInput, responses={201: ChannelOutput})
    def post(self, request: Request) -> Response:
        body = ChannelInput(data=request.data)
        body.is_valid(raise_exception=True)
        channel = channels.channel_create(tenant=request_tenant(request), **body.validated_data)
        return Response(ChannelOutput(channel).data, status=status.HTTP_201_CREATED)


class ChannelDetailView(APIView):
    read_role = "admin"
    write_role = "admin"

    @extend_schema(responses=ChannelOutput)
    def get(self, request: Request, channel_id: str) -> Response:
        channel = alerting_selectors.channel_get(
            tenant=request_tenant(request), channel_id=channel_id
        )
        return Response(ChannelOutput(channel).data)

    @extend_schema(request=ChannelFieldsInput, responses=ChannelOutput)
    def patch(self, request: Request, channel_id: str) -> Response:
        channel = alerting_selectors.channel_get(
            tenant=request_tenant(request), channel_id=channel_id
        )
        body = ChannelFieldsInput(data=request.data, partial=True)
        body.is_valid(raise_exception=True)
        channel = channels.channel_update(channel=channel, **body.validated_data)
        return Response(ChannelOutput(channel).data)

    @extend_schema(responses={204: None})
    def delete(self, request: Request, channel_id: str) -> Response:
        channel = alerting_selectors.channel_get(
            tenant=request_tenant(request), channel_id=channel_id
        )
        channels.channel_delete(channel=channel, note=body_note(request))
        return Response(status=status.HTTP_204_NO_CONTENT)


class ChannelTestView(APIView):
    write_role = "admin"

    @extend_schema(request=ChannelTestInput, responses=ChannelTestOutput)
    def post(self, request: Request, channel_id: str) -> Response:
        channel = alerting_selectors.channel_get(
            tenant=request_tenant(request), channel_id=channel_id
        )
        body = ChannelTestInput(data=request.data or {})
        body.is_valid(raise_exception=True)
        result = channels.channel_test(
            channel=channel, route=body.validated_data.get("slack_channel", "")
        )
        return Response({"ok": result.ok, "detail": result.detail})
