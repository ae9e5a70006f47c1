package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// SchemeGroupVersion is the API's group and version.
var SchemeGroupVersion = schema.GroupVersion{Group: Group, Version: Version}

var (
	schemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)
	// AddToScheme registers GPUReclaim and GPUReclaimList, for a typed
	// client (client-go's, controller-runtime's) to read them.
	AddToScheme = schemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(SchemeGroupVersion, &GPUReclaim{}, &GPUReclaimList{})
	metav1.AddToGroupVersion(s, SchemeGroupVersion)
	return nil
}
