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
    'test_bitcast_float64_to_int64':
      ('dtype', "cannot compile for webgpu: kernel 'model_k0': a bitcast from float64 to int64 needs 64-bit words"),
    'test_bitcast_int64_to_float64':
      ('dtype', "cannot compile for webgpu: kernel 'model_k0': a bitcast from int64 to float64 needs 64-bit words"),
    'test_bitshift_left_int64':
      ('dtype', "cannot compile for webgpu: kernel 'model_k0': a bitcast from int64 to uint64 needs 64-bit words"),
  },
}
