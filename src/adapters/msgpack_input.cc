#include "adapters/msgpack_input.h"

#include <cstdint>
#include <new>
#include <string>

namespace kvgov::adapters::internal {
namespace {

// msgpack-cxx allocates an array's or map's element slots as soon as it reads
// the header, before it knows whether the elements exist: a 5-byte array32
// header can ask for 2^32 x 16 bytes, and sixteen nested in-limit headers for
// 16 x 16 MiB. This visitor walks the same bytes first, allocating nothing,
// and throws on any size or depth over the limits and on any value that is
// not complete. The real unpack therefore only ever sees a complete value,
// where every claimed element is backed by at least one byte of payload.
class ShapeCheck : public msgpack::null_visitor {
 public:
  explicit ShapeCheck(const MsgpackLimits& limits) : limits_(limits) {}

  bool visit_str(const char* /*data*/, uint32_t size) {
    if (size > limits_.max_str) {
      throw msgpack::str_size_overflow("str of " + std::to_string(size) +
                                       " bytes exceeds max_str " + std::to_string(limits_.max_str));
    }
    return true;
  }
  bool visit_bin(const char* /*data*/, uint32_t size) {
    if (size > limits_.max_bin) {
      throw msgpack::bin_size_overflow("bin of " + std::to_string(size) +
                                       " bytes exceeds max_bin " + std::to_string(limits_.max_bin));
    }
    return true;
  }
  // `size` counts the ext type byte as well as the data.
  bool visit_ext(const char* /*data*/, uint32_t size) {
    if (limits_.max_ext == 0 || size - 1 > limits_.max_ext) {
      throw msgpack::ext_size_overflow("ext of " + std::to_string(size - 1) +
                                       " bytes exceeds max_ext " + std::to_string(limits_.max_ext));
    }
    return true;
  }
  bool start_array(uint32_t elements) {
    if (elements > limits_.max_array) {
      throw msgpack::array_size_overflow("array of " + std::to_string(elements) +
                                         " elements exceeds max_array " +
                                         std::to_string(limits_.max_array));
    }
    Enter();
    return true;
  }
  bool end_array() {
    --depth_;
    return true;
  }
  bool start_map(uint32_t pairs) {
    if (pairs > limits_.max_map) {
      throw msgpack::map_size_overflow("map of " + std::to_string(pairs) +
                                       " pairs exceeds max_map " + std::to_string(limits_.max_map));
    }
    Enter();
    return true;
  }
  bool end_map() {
    --depth_;
    return true;
  }
  void parse_error(size_t /*parsed_offset*/, size_t error_offset) {
    throw msgpack::parse_error("invalid msgpack byte at offset " + std::to_string(error_offset));
  }
  void insufficient_bytes(size_t /*parsed_offset*/, size_t error_offset) {
    throw msgpack::insufficient_bytes("truncated msgpack at offset " +
                                      std::to_string(error_offset));
  }

 private:
  void Enter() {
    if (++depth_ > limits_.max_depth) {
      throw msgpack::depth_size_overflow("nesting deeper than max_depth " +
                                         std::to_string(limits_.max_depth));
    }
  }

  const MsgpackLimits& limits_;
  uint32_t depth_ = 0;
};

// Strings and bins point into the payload instead of being copied: the
// payload outlives every object decoded from it (see UnpackUntrusted).
bool ReferencePayload(msgpack::type::object_type /*type*/, size_t /*size*/, void* /*user*/) {
  return true;
}

}  // namespace

Result<msgpack::object_handle> UnpackUntrusted(std::string_view payload,
                                               const MsgpackLimits& limits) {
  if (payload.size() > limits.max_payload_bytes) {
    return Status::ResourceExhausted("payload of " + std::to_string(payload.size()) +
                                     " bytes exceeds max_payload_bytes " +
                                     std::to_string(limits.max_payload_bytes));
  }
  if (payload.empty()) return Status::Corruption("payload: empty");
  try {
    ShapeCheck shape(limits);
    size_t end = 0;
    if (!msgpack::parse(payload.data(), payload.size(), end, shape)) {
      return Status::Corruption("payload: not a msgpack value");
    }
    if (end != payload.size()) {
      return Status::Corruption("payload: " + std::to_string(payload.size() - end) +
                                " trailing bytes after the top-level value");
    }
    // Same limits again: the shape pass is the guard, these keep the real
    // unpack safe on its own should the two ever drift apart.
    const msgpack::unpack_limit limit(
        limits.max_array, limits.max_map, limits.max_str, limits.max_bin,
        limits.max_ext == 0 ? 0 : size_t{limits.max_ext} + 1, limits.max_depth);
    size_t offset = 0;
    return msgpack::unpack(payload.data(), payload.size(), offset, &ReferencePayload, nullptr,
                           limit);
  } catch (const msgpack::size_overflow& e) {
    return Status::ResourceExhausted(std::string("payload: ") + e.what());
  } catch (const msgpack::insufficient_bytes& e) {
    return Status::Corruption(std::string("payload: ") + e.what());
  } catch (const msgpack::parse_error& e) {
    return Status::Corruption(std::string("payload: ") + e.what());
  } catch (const std::bad_alloc&) {
    return Status::ResourceExhausted("payload: out of memory while unpacking");
  } catch (const std::exception& e) {
    return Status::Corruption(std::string("payload: ") + e.what());
  } catch (...) {
    return Status::Corruption("payload: unpack failed");
  }
}

std::string_view TypeName(const msgpack::object& object) {
  switch (object.type) {
    case msgpack::type::NIL:
      return "nil";
    case msgpack::type::BOOLEAN:
      return "bool";
    case msgpack::type::POSITIVE_INTEGER:
    case msgpack::type::NEGATIVE_INTEGER:
      return "int";
    case msgpack::type::FLOAT32:
    case msgpack::type::FLOAT64:
      return "float";
    case msgpack::type::STR:
      return "str";
    case msgpack::type::BIN:
      return "bin";
    case msgpack::type::ARRAY:
      return "array";
    case msgpack::type::MAP:
      return "map";
    case msgpack::type::EXT:
      return "ext";
  }
  return "unknown";
}

}  // namespace kvgov::adapters::internal
