// How a generation parks its HTTP connection while it waits for the engine,
// and wakes it when there is something to send (libmicrohttpd's
// MHD_suspend_connection / MHD_resume_connection in http_api_server.cc; a
// fake in the tests). A parked connection costs no thread and no polling.
#ifndef MOESERVE_SERVER_OPENAI_CONNECTION_PARKING_H_
#define MOESERVE_SERVER_OPENAI_CONNECTION_PARKING_H_

namespace moeserve::server::openai {

class ConnectionParking {
 public:
  virtual ~ConnectionParking() = default;
  // Stops serving the connection until Wake(). Only from the connection's
  // own callbacks (the request handler or the response's reader).
  virtual void Park() = 0;
  // Serves the parked connection again. Any thread; once per Park().
  virtual void Wake() = 0;
};

}  // namespace moeserve::server::openai

#endif  // MOESERVE_SERVER_OPENAI_CONNECTION_PARKING_H_
