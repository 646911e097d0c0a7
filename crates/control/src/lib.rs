//! Controllers as pure functions of measured inputs: device choice (smallest expected queue delay), auto, qos.
