"""API errors as OpenAI-style error objects: a status, a message saying what was wrong, the field."""

from __future__ import annotations


class ApiError(Exception):
    def __init__(self, status: int, message: str, param: str | None = None, kind: str = "invalid_request_error"):
        super().__init__(message)
        self.status, self.message, self.param, self.kind = status, message, param, kind

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": None}}


def bad_request(message: str, param: str | None = None) -> ApiError:
    return ApiError(400, message, param)
