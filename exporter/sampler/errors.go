package sampler

import (
	"errors"
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// errNotSupported marks a call the GPU or driver does not support: the
// value is absent, the sample did not fail.
var errNotSupported = errors.New("not supported")

// nvmlError is a failed NVML call.
type nvmlError struct {
	call string
	ret  nvml.Return
}

func (e *nvmlError) Error() string { return fmt.Sprintf("%s: %s", e.call, retName(e.ret)) }

// retName is the stable name of a return code. Return.Error() asks the
// driver once it is loaded, which words it for people, not for labels.
func retName(r nvml.Return) string {
	if n, ok := retNames[r]; ok {
		return n
	}
	return fmt.Sprintf("ERROR_%d", int32(r))
}

var retNames = map[nvml.Return]string{
	nvml.SUCCESS:                       "SUCCESS",
	nvml.ERROR_UNINITIALIZED:           "ERROR_UNINITIALIZED",
	nvml.ERROR_INVALID_ARGUMENT:        "ERROR_INVALID_ARGUMENT",
	nvml.ERROR_NOT_SUPPORTED:           "ERROR_NOT_SUPPORTED",
	nvml.ERROR_NO_PERMISSION:           "ERROR_NO_PERMISSION",
	nvml.ERROR_NOT_FOUND:               "ERROR_NOT_FOUND",
	nvml.ERROR_INSUFFICIENT_SIZE:       "ERROR_INSUFFICIENT_SIZE",
	nvml.ERROR_INSUFFICIENT_POWER:      "ERROR_INSUFFICIENT_POWER",
	nvml.ERROR_DRIVER_NOT_LOADED:       "ERROR_DRIVER_NOT_LOADED",
	nvml.ERROR_TIMEOUT:                 "ERROR_TIMEOUT",
	nvml.ERROR_IRQ_ISSUE:               "ERROR_IRQ_ISSUE",
	nvml.ERROR_LIBRARY_NOT_FOUND:       "ERROR_LIBRARY_NOT_FOUND",
	nvml.ERROR_FUNCTION_NOT_FOUND:      "ERROR_FUNCTION_NOT_FOUND",
	nvml.ERROR_CORRUPTED_INFOROM:       "ERROR_CORRUPTED_INFOROM",
	nvml.ERROR_GPU_IS_LOST:             "ERROR_GPU_IS_LOST",
	nvml.ERROR_RESET_REQUIRED:          "ERROR_RESET_REQUIRED",
	nvml.ERROR_OPERATING_SYSTEM:        "ERROR_OPERATING_SYSTEM",
	nvml.ERROR_LIB_RM_VERSION_MISMATCH: "ERROR_LIB_RM_VERSION_MISMATCH",
	nvml.ERROR_IN_USE:                  "ERROR_IN_USE",
	nvml.ERROR_MEMORY:                  "ERROR_MEMORY",
	nvml.ERROR_NO_DATA:                 "ERROR_NO_DATA",
	nvml.ERROR_INSUFFICIENT_RESOURCES:  "ERROR_INSUFFICIENT_RESOURCES",
	nvml.ERROR_GPU_NOT_FOUND:           "ERROR_GPU_NOT_FOUND",
	nvml.ERROR_INVALID_STATE:           "ERROR_INVALID_STATE",
	nvml.ERROR_UNKNOWN:                 "ERROR_UNKNOWN",
}
