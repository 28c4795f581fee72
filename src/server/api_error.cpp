#include "server/api_error.h"

namespace lucid::server {

nlohmann::json ApiError::ToJson() const {
  nlohmann::json e = {{"message", message}, {"type", type}, {"param", nullptr}, {"code", nullptr}};
  if (!param.empty()) e["param"] = param;
  if (!code.empty()) e["code"] = code;
  return nlohmann::json{{"error", e}};
}

ApiError BadRequest(std::string message, std::string param, std::string code) {
  return ApiError{400, std::move(message), "invalid_request_error", std::move(param),
                  std::move(code)};
}

std::string JsonTypeName(const nlohmann::ordered_json& v) {
  if (v.is_null()) return "null";
  if (v.is_boolean()) return "a boolean";
  if (v.is_number_integer()) return "an integer";
  if (v.is_number()) return "a decimal";
  if (v.is_string()) return "a string";
  if (v.is_array()) return "an array";
  return "an object";
}

ApiError WrongType(const std::string& param, const std::string& expected,
                   const nlohmann::ordered_json& got) {
  return BadRequest("Invalid type for '" + param + "': expected " + expected + ", but got " +
                        JsonTypeName(got) + " instead.",
                    param, "invalid_type");
}

ApiError ContextTooLong(std::string message, std::string param) {
  return BadRequest(std::move(message), std::move(param), "context_length_exceeded");
}

ApiError NotFoundError(std::string message, std::string code) {
  return ApiError{404, std::move(message), "invalid_request_error", "", std::move(code)};
}

ApiError Unauthorized() {
  return ApiError{401, "Incorrect API key provided. Send it as 'Authorization: Bearer <key>'.",
                  "authentication_error", "", "invalid_api_key"};
}

ApiError PayloadTooLarge(size_t limit) {
  return ApiError{413, "Request body too large: the limit is " + std::to_string(limit) + " bytes.",
                  "invalid_request_error", "", "payload_too_large"};
}

ApiError TooManyRequests(std::string message) {
  return ApiError{429, std::move(message), "rate_limit_error", "", "rate_limit_exceeded"};
}

ApiError Unavailable(std::string message) {
  return ApiError{503, std::move(message), "service_unavailable", "", "service_unavailable"};
}

ApiError InternalError(std::string message) {
  return ApiError{500, std::move(message), "server_error", "", "internal_error"};
}

ApiError FromStatus(const Status& status, std::string param) {
  switch (status.code()) {
    case StatusCode::kInvalidArgument:
    case StatusCode::kOutOfRange:
      return BadRequest(status.message(), std::move(param));
    case StatusCode::kNotFound:
      return NotFoundError(status.message());
    case StatusCode::kResourceExhausted:
      return TooManyRequests(status.message());
    case StatusCode::kUnavailable:
    case StatusCode::kCancelled:
      return Unavailable(status.message());
    case StatusCode::kUnimplemented:
      return BadRequest(status.message(), std::move(param), "unsupported");
    default:
      return InternalError(status.ToString());
  }
}

}  // namespace lucid::server
