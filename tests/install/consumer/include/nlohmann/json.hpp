// Found first on the consumer's include path: hostir's public headers must
// not include nlohmann/json.hpp.
#error "a public hostir header included <nlohmann/json.hpp>"
