// ApiError: an HTTP status plus the OpenAI-style error body every failing route returns:
//   {"error": {"message": "...", "type": "...", "param": "..." | null, "code": "..." | null}}
// Types follow OpenAI: "invalid_request_error" (400/404/413), "authentication_error" (401),
// "rate_limit_error" (429), "server_error" (500), "service_unavailable" (503).
// Thread-safety: values.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "core/status.h"

namespace lucid::server {

struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // "" -> null
  std::string code;   // "" -> null

  nlohmann::json ToJson() const;  // the {"error": {...}} body
};

// 400 invalid_request_error naming `param` (may be empty).
ApiError BadRequest(std::string message, std::string param = "", std::string code = "");
// 400 with code "invalid_type": "Invalid type for 'p': expected X, but got Y instead."
ApiError WrongType(const std::string& param, const std::string& expected,
                   const nlohmann::ordered_json& got);
// 400 "context_length_exceeded".
ApiError ContextTooLong(std::string message, std::string param);
ApiError NotFoundError(std::string message, std::string code = "");
ApiError Unauthorized();
ApiError PayloadTooLarge(size_t limit);
ApiError TooManyRequests(std::string message);
ApiError Unavailable(std::string message);
ApiError InternalError(std::string message);

// Maps an engine/tokenizer Status to an ApiError: InvalidArgument/OutOfRange -> 400,
// NotFound -> 404, ResourceExhausted -> 429, Unavailable/Cancelled -> 503, others -> 500.
ApiError FromStatus(const Status& status, std::string param = "");

// The JSON type name of `v` as OpenAI words it ("a string", "an integer", "null", ...).
std::string JsonTypeName(const nlohmann::ordered_json& v);

}  // namespace lucid::server
