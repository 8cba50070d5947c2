#include "gateway/event_relay.h"

#include "kvgov/codec/gateway_api.h"

namespace kvgov::gateway {

asio::awaitable<RelayEnd> RelayEvents(Exchange& exchange, UpstreamCall& call,
                                      std::string first_piece, const EventFilter& keep,
                                      const std::function<void()>& after_first_write,
                                      Plane& plane) {
  RelayEnd end;
  bool written = false;
  SseSplitter splitter;
  std::string_view piece = first_piece;  // each Read's holds until the next
  for (;;) {
    std::string out;
    for (std::string& event : splitter.Push(piece)) {
      if (keep(SseSplitter::Data(event))) out += event;
    }
    plane.CountRelayed(out.size());
    if (!out.empty() && !co_await exchange.Send(out)) {
      call.Abort();  // the engine sees its client go and aborts the request
      end.client_gone = true;
      co_return end;
    }
    if (!written && !out.empty()) {
      written = true;
      if (after_first_write) after_first_write();
    }
    if (call.done()) break;
    Result<std::string_view> next = co_await call.Read();
    if (!next.ok()) {
      end.upstream = next.status();
      break;
    }
    piece = *next;
  }
  std::string rest = splitter.Rest();
  if (!rest.empty() && !co_await exchange.Send(rest)) end.client_gone = true;
  end.client_gone = end.client_gone || exchange.client_gone();
  co_return end;
}

}  // namespace kvgov::gateway
