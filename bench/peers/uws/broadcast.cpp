// Written for bench/run.sh against uWebSockets' benchmarks/broadcast_test.c (Apache-2.0, as uWS).
// uWebSockets topics, canonical form: every client subscribes to "b"; each message is published with app.publish.
#include "App.h"
int main(int argc, char **argv) {
    int port = argc > 1 ? atoi(argv[1]) : 9011;
    struct PerSocketData {};
    uWS::App *app = new uWS::App();
    app->ws<PerSocketData>("/*", {
        .compression = uWS::DISABLED,
        .maxPayloadLength = 16 * 1024 * 1024,
        .idleTimeout = 0,
        .maxBackpressure = 16 * 1024 * 1024,
        .open = [](auto *ws) { ws->subscribe("b"); },
        .message = [app](auto */*ws*/, std::string_view message, uWS::OpCode opCode) { app->publish("b", message, opCode); },
    }).listen(port, [](auto *t) { if (!t) exit(1); });
    app->run();
}
