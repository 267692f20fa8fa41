class MLComputeDevice:
    pass


class MLCPUComputeDevice(MLComputeDevice):
    pass


class MLGPUComputeDevice(MLComputeDevice):
    pass


class MLNeuralEngineComputeDevice(MLComputeDevice):
    pass
