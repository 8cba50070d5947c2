#include "gateway/routes.h"

namespace kvgov::gateway {

namespace http = boost::beast::http;

void Routes::Get(std::string path, Handler handler) {
  routes_[{http::verb::get, std::move(path)}] = std::move(handler);
}

void Routes::Post(std::string path, Handler handler) {
  routes_[{http::verb::post, std::move(path)}] = std::move(handler);
}

std::string_view PathOf(const Request& request) {
  const std::string_view target = request.target();
  return target.substr(0, target.find('?'));
}

Handler Routes::Dispatch(Handler no_route) && {
  auto table = std::make_shared<const decltype(routes_)>(std::move(routes_));
  return [table, no_route = std::move(no_route)](Exchange& exchange) -> asio::awaitable<void> {
    const Request& request = exchange.request();
    const auto route = table->find(std::pair(request.method(), std::string(PathOf(request))));
    const Handler& handler = route == table->end() ? no_route : route->second;
    co_await handler(exchange);
  };
}

}  // namespace kvgov::gateway
