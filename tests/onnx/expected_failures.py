"""Known failures of the ONNX node conformance cases: case name -> (category, reason).
EXPECTED_FAILURES fail on every device (the reference device "numpy" included); TARGET_FAILURES lists,
per compiled device, the further cases that fail there. Every entry really fails
(tests/onnx/test_conformance.py marks them xfail(strict=True)); regenerate with
`python scripts/conformance.py --devices numpy c --update-expected` and review the diff."""
from __future__ import annotations

EXPECTED_FAILURES: dict[str, tuple[str, str]] = {
  'test_ai_onnx_ml_label_encoder_string_int':
    ('string tensors', "unsupported ONNX operator: ai.onnx.ml:LabelEncoder (opset 4) at node 'LabelEncoder..."),
  'test_ai_onnx_ml_label_encoder_string_int_no_default':
    ('string tensors', "unsupported ONNX operator: ai.onnx.ml:LabelEncoder (opset 4) at node 'LabelEncoder..."),
  'test_ai_onnx_ml_label_encoder_tensor_mapping':
    ('string tensors', "unsupported ONNX operator: ai.onnx.ml:LabelEncoder (opset 4) at node 'LabelEncoder..."),
  'test_ai_onnx_ml_label_encoder_tensor_value_only_mapping':
    ('string tensors', "unsupported ONNX operator: ai.onnx.ml:LabelEncoder (opset 4) at node 'LabelEncoder..."),
  'test_bernoulli':
    ('random operators', "unsupported ONNX operator: RandomUniformLike (opset 22) at node 'RandomUniformLi..."),
  'test_bernoulli_double':
    ('random operators', "unsupported ONNX operator: RandomUniformLike (opset 22) at node 'RandomUniformLi..."),
  'test_bernoulli_double_expanded':
    ('random operators', "unsupported ONNX operator: RandomUniformLike (opset 22) at node 'RandomUniformLi..."),
  'test_bernoulli_expanded':
    ('random operators', "unsupported ONNX operator: RandomUniformLike (opset 22) at node 'RandomUniformLi..."),
  'test_bernoulli_seed':
    ('random operators', "unsupported ONNX operator: RandomUniformLike (opset 22) at node 'RandomUniformLi..."),
  'test_bernoulli_seed_expanded':
    ('random operators', "unsupported ONNX operator: RandomUniformLike (opset 22) at node 'RandomUniformLi..."),
  'test_cast_e8m0_FLOAT16_to_FLOAT8E8M0':
    ('float8e8m0 dtype', "node 'Cast->output' (Cast) attribute 'to': element type FLOAT8E8M0 is not suppor..."),
  'test_cast_e8m0_FLOAT8E8M0_to_FLOAT':
    ('float8e8m0 dtype', "input 'input': element type FLOAT8E8M0 is not supported"),
  'test_cast_e8m0_FLOAT8E8M0_to_FLOAT16':
    ('float8e8m0 dtype', "input 'input': element type FLOAT8E8M0 is not supported"),
  'test_cast_e8m0_FLOAT_to_FLOAT8E8M0':
    ('float8e8m0 dtype', "node 'Cast->output' (Cast) attribute 'to': element type FLOAT8E8M0 is not suppor..."),
  'test_equal_string':
    ('string tensors', "input 'x': element type STRING is not supported"),
  'test_equal_string_broadcast':
    ('string tensors', "input 'x': element type STRING is not supported"),
  'test_identity_opt':
    ('sequence and optional types', 'test data: list values (sequences, maps, optionals) are not supported'),
  'test_identity_sequence':
    ('sequence and optional types', 'test data: list values (sequences, maps, optionals) are not supported'),
  'test_if_opt':
    ('sequence and optional types', 'test data: list values (sequences, maps, optionals) are not supported'),
  'test_if_seq':
    ('sequence and optional types', 'test data: list values (sequences, maps, optionals) are not supported'),
  'test_image_decoder_decode_bmp_rgb':
    ('image decoding', "unsupported ONNX operator: ImageDecoder (opset 20) at node 'ImageDecoder->output'"),
  'test_image_decoder_decode_jpeg2k_rgb':
    ('image decoding', "unsupported ONNX operator: ImageDecoder (opset 20) at node 'ImageDecoder->output'"),
  'test_image_decoder_decode_jpeg_bgr':
    ('image decoding', "unsupported ONNX operator: ImageDecoder (opset 20) at node 'ImageDecoder->output'"),
  'test_image_decoder_decode_jpeg_grayscale':
    ('image decoding', "unsupported ONNX operator: ImageDecoder (opset 20) at node 'ImageDecoder->output'"),
  'test_image_decoder_decode_jpeg_rgb':
    ('image decoding', "unsupported ONNX operator: ImageDecoder (opset 20) at node 'ImageDecoder->output'"),
  'test_image_decoder_decode_png_rgb':
    ('image decoding', "unsupported ONNX operator: ImageDecoder (opset 20) at node 'ImageDecoder->output'"),
  'test_image_decoder_decode_pnm_rgb':
    ('image decoding', "unsupported ONNX operator: ImageDecoder (opset 20) at node 'ImageDecoder->output'"),
  'test_image_decoder_decode_tiff_rgb':
    ('image decoding', "unsupported ONNX operator: ImageDecoder (opset 20) at node 'ImageDecoder->output'"),
  'test_image_decoder_decode_webp_rgb':
    ('image decoding', "unsupported ONNX operator: ImageDecoder (opset 20) at node 'ImageDecoder->output'"),
  'test_loop13_seq':
    ('sequence and optional types', 'test data: list values (sequences, maps, optionals) are not supported'),
  'test_loop16_seq_none':
    ('sequence and optional types', 'test data: list values (sequences, maps, optionals) are not supported'),
  'test_nonmaxsuppression_center_point_box_format':
    ('operator not implemented', "unsupported ONNX operator: NonMaxSuppression (opset 11) at node 'NonMaxS..."),
  'test_nonmaxsuppression_flipped_coordinates':
    ('operator not implemented', "unsupported ONNX operator: NonMaxSuppression (opset 11) at node 'NonMaxS..."),
  'test_nonmaxsuppression_identical_boxes':
    ('operator not implemented', "unsupported ONNX operator: NonMaxSuppression (opset 11) at node 'NonMaxS..."),
  'test_nonmaxsuppression_iou_threshold_boundary':
    ('operator not implemented', "unsupported ONNX operator: NonMaxSuppression (opset 11) at node 'NonMaxS..."),
  'test_nonmaxsuppression_limit_output_size':
    ('operator not implemented', "unsupported ONNX operator: NonMaxSuppression (opset 11) at node 'NonMaxS..."),
  'test_nonmaxsuppression_single_box':
    ('operator not implemented', "unsupported ONNX operator: NonMaxSuppression (opset 11) at node 'NonMaxS..."),
  'test_nonmaxsuppression_suppress_by_IOU':
    ('operator not implemented', "unsupported ONNX operator: NonMaxSuppression (opset 11) at node 'NonMaxS..."),
  'test_nonmaxsuppression_suppress_by_IOU_and_scores':
    ('operator not implemented', "unsupported ONNX operator: NonMaxSuppression (opset 11) at node 'NonMaxS..."),
  'test_nonmaxsuppression_two_batches':
    ('operator not implemented', "unsupported ONNX operator: NonMaxSuppression (opset 11) at node 'NonMaxS..."),
  'test_nonmaxsuppression_two_classes':
    ('operator not implemented', "unsupported ONNX operator: NonMaxSuppression (opset 11) at node 'NonMaxS..."),
  'test_optional_get_element_optional_sequence':
    ('sequence and optional types', 'test data: list values (sequences, maps, optionals) are not supported'),
  'test_optional_get_element_sequence':
    ('sequence and optional types', 'test data: list values (sequences, maps, optionals) are not supported'),
  'test_optional_has_element_empty_optional_input':
    ('sequence and optional types', 'test data: NoneType values (sequences, maps, optionals) are not suppo...'),
  'test_regex_full_match_basic':
    ('string tensors', "unsupported ONNX operator: RegexFullMatch (opset 20) at node 'RegexFullMatch->Y'"),
  'test_regex_full_match_email_domain':
    ('string tensors', "unsupported ONNX operator: RegexFullMatch (opset 20) at node 'RegexFullMatch->Y'"),
  'test_regex_full_match_empty':
    ('string tensors', "unsupported ONNX operator: RegexFullMatch (opset 20) at node 'RegexFullMatch->Y'"),
  'test_sequence_insert_at_back':
    ('sequence and optional types', 'test data: list values (sequences, maps, optionals) are not supported'),
  'test_sequence_insert_at_front':
    ('sequence and optional types', 'test data: list values (sequences, maps, optionals) are not supported'),
  'test_sequence_map_add_1_sequence_1_tensor':
    ('sequence and optional types', 'test data: list values (sequences, maps, optionals) are not supported'),
  'test_sequence_map_add_1_sequence_1_tensor_expanded':
    ('sequence and optional types', 'test data: list values (sequences, maps, optionals) are not supported'),
  'test_sequence_map_add_2_sequences':
    ('sequence and optional types', 'test data: list values (sequences, maps, optionals) are not supported'),
  'test_sequence_map_add_2_sequences_expanded':
    ('sequence and optional types', 'test data: list values (sequences, maps, optionals) are not supported'),
  'test_sequence_map_extract_shapes':
    ('sequence and optional types', 'test data: list values (sequences, maps, optionals) are not supported'),
  'test_sequence_map_extract_shapes_expanded':
    ('sequence and optional types', 'test data: list values (sequences, maps, optionals) are not supported'),
  'test_sequence_map_identity_1_sequence':
    ('sequence and optional types', 'test data: list values (sequences, maps, optionals) are not supported'),
  'test_sequence_map_identity_1_sequence_1_tensor':
    ('sequence and optional types', 'test data: list values (sequences, maps, optionals) are not supported'),
  'test_sequence_map_identity_1_sequence_1_tensor_expanded':
    ('sequence and optional types', 'test data: list values (sequences, maps, optionals) are not supported'),
  'test_sequence_map_identity_1_sequence_expanded':
    ('sequence and optional types', 'test data: list values (sequences, maps, optionals) are not supported'),
  'test_sequence_map_identity_2_sequences':
    ('sequence and optional types', 'test data: list values (sequences, maps, optionals) are not supported'),
  'test_sequence_map_identity_2_sequences_expanded':
    ('sequence and optional types', 'test data: list values (sequences, maps, optionals) are not supported'),
  'test_split_to_sequence_1':
    ('sequence and optional types', 'test data: list values (sequences, maps, optionals) are not supported'),
  'test_split_to_sequence_2':
    ('sequence and optional types', 'test data: list values (sequences, maps, optionals) are not supported'),
  'test_split_to_sequence_nokeepdims':
    ('sequence and optional types', 'test data: list values (sequences, maps, optionals) are not supported'),
  'test_string_concat':
    ('string tensors', "unsupported ONNX operator: StringConcat (opset 20) at node 'StringConcat->result'"),
  'test_string_concat_broadcasting':
    ('string tensors', "unsupported ONNX operator: StringConcat (opset 20) at node 'StringConcat->result'"),
  'test_string_concat_empty_string':
    ('string tensors', "unsupported ONNX operator: StringConcat (opset 20) at node 'StringConcat->result'"),
  'test_string_concat_utf8':
    ('string tensors', "unsupported ONNX operator: StringConcat (opset 20) at node 'StringConcat->result'"),
  'test_string_concat_zero_dimensional':
    ('string tensors', "unsupported ONNX operator: StringConcat (opset 20) at node 'StringConcat->result'"),
  'test_string_split_basic':
    ('string tensors', "unsupported ONNX operator: StringSplit (opset 20) at node 'StringSplit->substrings'"),
  'test_string_split_consecutive_delimiters':
    ('string tensors', "unsupported ONNX operator: StringSplit (opset 20) at node 'StringSplit->substrings'"),
  'test_string_split_empty_string_delimiter':
    ('string tensors', "unsupported ONNX operator: StringSplit (opset 20) at node 'StringSplit->substrings'"),
  'test_string_split_empty_tensor':
    ('string tensors', "unsupported ONNX operator: StringSplit (opset 20) at node 'StringSplit->substrings'"),
  'test_string_split_maxsplit':
    ('string tensors', "unsupported ONNX operator: StringSplit (opset 20) at node 'StringSplit->substrings'"),
  'test_string_split_no_delimiter':
    ('string tensors', "unsupported ONNX operator: StringSplit (opset 20) at node 'StringSplit->substrings'"),
  'test_strnormalizer_export_monday_casesensintive_lower':
    ('string tensors', "unsupported ONNX operator: StringNormalizer (opset 10) at node 'StringNormalizer->..."),
  'test_strnormalizer_export_monday_casesensintive_nochangecase':
    ('string tensors', "unsupported ONNX operator: StringNormalizer (opset 10) at node 'StringNormalizer->..."),
  'test_strnormalizer_export_monday_casesensintive_upper':
    ('string tensors', "unsupported ONNX operator: StringNormalizer (opset 10) at node 'StringNormalizer->..."),
  'test_strnormalizer_export_monday_empty_output':
    ('string tensors', "unsupported ONNX operator: StringNormalizer (opset 10) at node 'StringNormalizer->..."),
  'test_strnormalizer_export_monday_insensintive_upper_twodim':
    ('string tensors', "unsupported ONNX operator: StringNormalizer (opset 10) at node 'StringNormalizer->..."),
  'test_strnormalizer_nostopwords_nochangecase':
    ('string tensors', "unsupported ONNX operator: StringNormalizer (opset 10) at node 'StringNormalizer->..."),
  'test_training_dropout':
    ('random operators', "node 'Dropout->y' (Dropout): training-mode Dropout is random and not supported"),
  'test_training_dropout_default':
    ('random operators', "node 'Dropout->y' (Dropout): training-mode Dropout is random and not supported"),
  'test_training_dropout_default_mask':
    ('random operators', "node 'Dropout->y' (Dropout): training-mode Dropout is random and not supported"),
  'test_training_dropout_mask':
    ('random operators', "node 'Dropout->y' (Dropout): training-mode Dropout is random and not supported"),
}

TARGET_FAILURES: dict[str, dict[str, tuple[str, str]]] = {
  'c': {
  },
  'opencl': {
  },
  'webgpu': {
    'test_adagrad':
      ('other', "ValueError: webgpu: kernel 'e_1_12ddab': buffer data3 is int64; WGSL has no 64-bit intege..."),
    'test_adagrad_multiple':
      ('other', "ValueError: webgpu: kernel 'e_1_12ddab': buffer data3 is int64; WGSL has no 64-bit intege..."),
    'test_adam':
      ('dtype', 'TypeError: dtype float64 is not supported on device webgpu (used by CONST)'),
    'test_adam_multiple':
      ('dtype', 'TypeError: dtype float64 is not supported on device webgpu (used by CONST)'),
    'test_ai_onnx_ml_array_feature_extractor':
      ('other', "ValueError: webgpu: kernel 'r_3_ac9f7f': buffer data1 is int64; WGSL has no 64-bit intege..."),
    'test_ai_onnx_ml_tree_ensemble_single_tree':
      ('dtype', 'TypeError: dtype float64 is not supported on device webgpu (used by BUFFER)'),
    'test_argmax_default_axis_example':
      ('other', "ValueError: webgpu: kernel 'r_1_9504cf': buffer data0 is int64; WGSL has no 64-bit intege..."),
    'test_argmax_default_axis_example_select_last_index':
      ('other', "ValueError: webgpu: kernel 'r_1_fb2539': buffer data0 is int64; WGSL has no 64-bit intege..."),
    'test_argmin_default_axis_example':
      ('other', "ValueError: webgpu: kernel 'r_1_ff221e': buffer data0 is int64; WGSL has no 64-bit intege..."),
    'test_argmin_default_axis_example_select_last_index':
      ('other', "ValueError: webgpu: kernel 'r_1_40f31a': buffer data0 is int64; WGSL has no 64-bit intege..."),
    'test_cast_DOUBLE_to_FLOAT':
      ('dtype', 'TypeError: dtype float64 is not supported on device webgpu (used by BUFFER)'),
    'test_castlike_DOUBLE_to_FLOAT':
      ('dtype', 'TypeError: dtype float64 is not supported on device webgpu (used by BUFFER)'),
    'test_cumprod_1d':
      ('dtype', 'TypeError: dtype float64 is not supported on device webgpu (used by BUFFER)'),
    'test_cumprod_1d_exclusive':
      ('dtype', 'TypeError: dtype float64 is not supported on device webgpu (used by BUFFER)'),
    'test_cumsum_1d':
      ('dtype', 'TypeError: dtype float64 is not supported on device webgpu (used by BUFFER)'),
    'test_cumsum_1d_exclusive':
      ('dtype', 'TypeError: dtype float64 is not supported on device webgpu (used by BUFFER)'),
    'test_einsum_batch_diagonal':
      ('dtype', 'TypeError: dtype float64 is not supported on device webgpu (used by BUFFER)'),
    'test_einsum_batch_matmul':
      ('dtype', 'TypeError: dtype float64 is not supported on device webgpu (used by BUFFER)'),
    'test_eyelike_with_dtype':
      ('dtype', 'TypeError: dtype float64 is not supported on device webgpu (used by CAST)'),
    'test_gather_0':
      ('other', "ValueError: webgpu: kernel 'r_3_4_3_3c38a4': buffer data1 is int64; WGSL has no 64-bit in..."),
    'test_gather_1':
      ('other', "ValueError: webgpu: kernel 'r_3_3_5_462620': buffer data1 is int64; WGSL has no 64-bit in..."),
    'test_gather_elements_0':
      ('other', "ValueError: webgpu: kernel 'r_2_1d8ac6': buffer data1 is int64; WGSL has no 64-bit intege..."),
    'test_gather_elements_1':
      ('other', "ValueError: webgpu: kernel 'r_3_373b9c': buffer data1 is int64; WGSL has no 64-bit intege..."),
    'test_gathernd_example_float32':
      ('other', "ValueError: webgpu: kernel 'r_2_79b49a': buffer data1 is int64; WGSL has no 64-bit intege..."),
    'test_gathernd_example_int32':
      ('other', "ValueError: webgpu: kernel 'r_1_d76748': buffer data1 is int64; WGSL has no 64-bit intege..."),
    'test_maxunpool_export_with_output_shape':
      ('other', "ValueError: webgpu: kernel 'r_5_5_45e9b8': buffer data1 is int64; WGSL has no 64-bit inte..."),
    'test_maxunpool_export_without_output_shape':
      ('other', "ValueError: webgpu: kernel 'r_4_446ade': buffer data1 is int64; WGSL has no 64-bit intege..."),
    'test_momentum':
      ('other', "ValueError: webgpu: kernel 'e_2_5f3a65': buffer data4 is int64; WGSL has no 64-bit intege..."),
    'test_momentum_multiple':
      ('other', "ValueError: webgpu: kernel 'e_1_7f55ec': buffer data4 is int64; WGSL has no 64-bit intege..."),
    'test_nllloss_NC':
      ('other', "ValueError: webgpu: kernel 'r_3_819262': buffer data1 is int64; WGSL has no 64-bit intege..."),
    'test_nllloss_NC_expanded':
      ('other', "ValueError: webgpu: kernel 'r_3_df0c70': buffer data1 is int64; WGSL has no 64-bit intege..."),
    'test_onehot_negative_indices':
      ('other', "ValueError: webgpu: kernel 'e_10_3_91cb10': buffer data1 is int64; WGSL has no 64-bit int..."),
    'test_onehot_out_of_range_indices':
      ('other', "ValueError: webgpu: kernel 'e_5_3_0ca350': buffer data1 is int64; WGSL has no 64-bit inte..."),
    'test_reduce_log_sum_exp_default_axes_keepdims_example':
      ('dtype', 'TypeError: dtype float64 is not supported on device webgpu (used by BUFFER)'),
    'test_reduce_log_sum_exp_default_axes_keepdims_example_expanded':
      ('dtype', 'TypeError: dtype float64 is not supported on device webgpu (used by BUFFER)'),
    'test_reversesequence_batch':
      ('other', "ValueError: webgpu: kernel 'r_4_78f056': buffer data2 is int64; WGSL has no 64-bit intege..."),
    'test_reversesequence_bfloat16':
      ('other', "ValueError: webgpu: kernel 'r_2_8ec2d1': buffer data2 is int64; WGSL has no 64-bit intege..."),
    'test_roialign_aligned_false':
      ('other', "ValueError: webgpu: kernel 'r_5_5_3_2e9ff9': buffer data1 is int64; WGSL has no 64-bit in..."),
    'test_roialign_aligned_true':
      ('other', "ValueError: webgpu: kernel 'r_5_5_3_2e9ff9': buffer data1 is int64; WGSL has no 64-bit in..."),
    'test_rotary_embedding':
      ('other', "ValueError: webgpu: kernel 'r_3_340dcb': buffer data1 is int64; WGSL has no 64-bit intege..."),
    'test_rotary_embedding_3d_input':
      ('other', "ValueError: webgpu: kernel 'r_3_340dcb': buffer data1 is int64; WGSL has no 64-bit intege..."),
    'test_scatter_elements_with_axis':
      ('other', "ValueError: webgpu: kernel 'r_5_9447c8': buffer data1 is int64; WGSL has no 64-bit intege..."),
    'test_scatter_elements_with_duplicate_indices':
      ('other', "ValueError: webgpu: kernel 'r_5_3738cc': buffer data2 is int64; WGSL has no 64-bit intege..."),
    'test_scatter_with_axis':
      ('other', "ValueError: webgpu: kernel 'r_5_9447c8': buffer data1 is int64; WGSL has no 64-bit intege..."),
    'test_scatter_without_axis':
      ('other', "ValueError: webgpu: kernel 'r_3_3_c100a6': buffer data1 is int64; WGSL has no 64-bit inte..."),
    'test_scatternd':
      ('other', "ValueError: webgpu: kernel 'r_1_1dc73c': buffer data1 is int64; WGSL has no 64-bit intege..."),
    'test_scatternd_add':
      ('other', "ValueError: webgpu: kernel 'r_4_d5bff2': buffer data2 is int64; WGSL has no 64-bit intege..."),
    'test_sce_NCd1_mean_weight_negative_ii':
      ('other', "ValueError: webgpu: kernel 'r_3_3_cfc215': buffer data1 is int64; WGSL has no 64-bit inte..."),
    'test_sce_NCd1_mean_weight_negative_ii_expanded':
      ('other', "ValueError: webgpu: kernel 'r_3_3_cfc215': buffer data1 is int64; WGSL has no 64-bit inte..."),
    'test_tensorscatter':
      ('other', "ValueError: webgpu: kernel 'e_5_4_2_c39ed2': buffer data2 is int64; WGSL has no 64-bit in..."),
    'test_tensorscatter_3d':
      ('other', "ValueError: webgpu: kernel 'r_5_4_3_55100b': buffer data2 is int64; WGSL has no 64-bit in..."),
    'test_top_k':
      ('other', "ValueError: webgpu: kernel 'r_3_3_482906': buffer data0 is int64; WGSL has no 64-bit inte..."),
    'test_top_k_negative_axis':
      ('other', "ValueError: webgpu: kernel 'r_3_3_482906': buffer data0 is int64; WGSL has no 64-bit inte..."),
    'test_tril':
      ('other', "ValueError: webgpu: kernel 'e_5_4_b6e1eb': buffer data0 is int64; WGSL has no 64-bit inte..."),
    'test_tril_neg':
      ('other', "ValueError: webgpu: kernel 'e_5_4_35ffe7': buffer data0 is int64; WGSL has no 64-bit inte..."),
    'test_where_long_example':
      ('other', "ValueError: webgpu: kernel 'e_2_2_82b1cc': buffer data0 is int64; WGSL has no 64-bit inte..."),
  },
}
