// The API's routes: each method and path pattern with its handler over the Engine, registered on
// the HTTP server by ApiServer. Internal to tessera_api.
#pragma once

#include "api/engine.h"
#include "net/http_server.h"

namespace tessera::api {

// Registers every route of the API on `http`, each request timed for
// tessera_http_request_duration_seconds and its text checked (CheckRequestText) first.
void AddApiRoutes(net::HttpServer& http, Engine* e);

}  // namespace tessera::api
