// The dashboard's embedded assets (no external scripts, styles or fonts): its stylesheet and its
// script, put together with the page's markup by DashboardHtml() (dashboard.cc).
#pragma once

namespace tessera::api {

const char* DashboardCss();  // style.cc
const char* DashboardJs();   // script.cc

}  // namespace tessera::api
