;;; forj-tools.el --- Tool-call blocks: find, parse, and hand to the worker  -*- lexical-binding: t; -*-

;; Copyright (C) 2026 The forj authors

;; This program is free software; you can redistribute it and/or modify
;; it under the terms of the GNU General Public License as published by
;; the Free Software Foundation, either version 3 of the License, or
;; (at your option) any later version.

;; This program is distributed in the hope that it will be useful,
;; but WITHOUT ANY WARRANTY; without even the implied warranty of
;; MERCHANTABILITY or FITNESS FOR A PARTICULAR PURPOSE.  See the
;; GNU General Public License for more details.

;; You should have received a copy of the GNU General Public License
;; along with this program.  If not, see <https://www.gnu.org/licenses/>.

;;; Commentary:

;; A model asks for tools by writing fenced blocks (seed 001 section 3):
;;
;;   ```tool-call
;;   {"id": "1", "name": "read_file", "args": {"path": "src/a.el"}}
;;   ```
;;
;; `forj-tools-parse-region' finds every such block in a region with
;; CommonMark's fence rules (``` or ~~~, three or more, closed by a fence
;; of the same character at least as long and with no info string), so a
;; tool-call fence shown inside another code block is content, not a
;; call.  One call per block; all blocks of one message form one batch,
;; in order.  A block that cannot be a call (broken JSON, trailing
;; garbage, no id or name, too large, never closed) becomes an error
;; entry with the position of the fault, never an Emacs error: the batch
;; flow answers it with an error result the model can act on.
;;
;; Planning, review and rendering build on this (forj-review.el and the
;; batch flow come next).

;;; Code:

(require 'cl-lib)
(require 'subr-x)
(require 'forj)

;;; Options

(defcustom forj-tools-max-block-bytes (* 1024 1024)
  "Largest tool-call block, in bytes, that is parsed at all.
Larger ones become error entries; the worker's own limit on arguments
\(256 KiB by default) applies to what passes."
  :type 'integer
  :group 'forj)

;;; Parsing

(defconst forj-tools--fence-re
  "^\\( \\{0,3\\}\\)\\(`\\{3,\\}\\|~\\{3,\\}\\)[ \t]*\\([^ \t\n`]*\\)[^\n]*$"
  "An opening or closing code fence: indent, fence, first word of the info string.")

(defun forj-tools-parse-region (beg end)
  "Parse the tool-call blocks between BEG and END in the current buffer.
Return a list, in buffer order, of plists: (:call CALL :beg B :end E)
for a block holding a call (CALL is the JSON object as a plist), or
\(:error MESSAGE :beg B :end E :id ID) for a block that cannot be one;
ID is the call's id when it could be read.  B and E span the whole
block, fences included."
  (save-excursion
    (save-restriction
      (widen)
      (goto-char beg)
      (unless (bolp) (forward-line 1))
      (let ((results nil)
            (open nil))                 ; (CHAR LENGTH INFO BLOCK-START CONTENT-START)
        (while (and (< (point) end) (not (eobp)))
          (let ((line-start (point))
                (line-end (line-end-position)))
            (when (looking-at forj-tools--fence-re)
              (let* ((fence (match-string-no-properties 2))
                     (info (downcase (match-string-no-properties 3)))
                     (rest (buffer-substring-no-properties (match-end 2) line-end)))
                (cond
                 ((null open)
                  (unless (and (eq (aref fence 0) ?`) (string-match-p "`" rest))
                    (setq open (list (aref fence 0) (length fence) info line-start
                                     (min (1+ line-end) (point-max))))))
                 ((and (eq (aref fence 0) (nth 0 open))
                       (>= (length fence) (nth 1 open))
                       (string-match-p "\\`[ \t]*\\'" rest))
                  (when (equal (nth 2 open) "tool-call")
                    (push (forj-tools--parse-block (nth 3 open) (nth 4 open) line-start
                                                   (min (1+ line-end) (point-max)))
                          results))
                  (setq open nil)))))
            (forward-line 1)))
        (when (and open (equal (nth 2 open) "tool-call"))
          (push (list :error (format "The tool-call block at line %d is never closed with ```"
                                     (line-number-at-pos (nth 3 open)))
                      :beg (nth 3 open) :end end :id nil)
                results))
        (nreverse results)))))

(defun forj-tools--parse-block (block-start content-start content-end block-end)
  "Parse one tool-call block.
The block spans BLOCK-START to BLOCK-END, fences included; its JSON
lies between CONTENT-START and CONTENT-END."
  (let ((text (buffer-substring-no-properties content-start content-end))
        (fail (lambda (message &optional id)
                (list :error message :beg block-start :end block-end :id id))))
    (cond
     ((> (string-bytes text) forj-tools-max-block-bytes)
      (funcall fail (format "The tool-call block at line %d is %d bytes, over the %d-byte limit"
                            (line-number-at-pos block-start) (string-bytes text)
                            forj-tools-max-block-bytes)))
     ((string-blank-p text)
      (funcall fail (format "The tool-call block at line %d is empty"
                            (line-number-at-pos block-start))))
     (t
      (condition-case err
          (let ((call (forj-tools-json-decode text)))
            (cond
             ((not (and (listp call) (keywordp (car-safe call))))
              (funcall fail (format "The tool-call block at line %d must hold one JSON object"
                                    (line-number-at-pos block-start))))
             ((not (and (stringp (plist-get call :id)) (> (length (plist-get call :id)) 0)))
              (funcall fail (format "The call at line %d has no \"id\" (a non-empty string)"
                                    (line-number-at-pos block-start))))
             ((not (and (stringp (plist-get call :name)) (> (length (plist-get call :name)) 0)))
              (funcall fail (format "The call at line %d has no \"name\" (the tool to run)"
                                    (line-number-at-pos block-start))
                       (plist-get call :id)))
             (t (list :call call :beg block-start :end block-end))))
        ;; Any error at all: json.el, when loaded, redefines some of the
        ;; native parser's error symbols, so `json-parse-error' alone
        ;; would not catch them all.
        (error
         (funcall fail (forj-tools--json-error-message err content-start))))))))

(defun forj-tools--json-error-message (err content-start)
  "A readable message for the JSON error ERR in a block starting at CONTENT-START."
  (let* ((data (cdr err))
         (what (if (stringp (car data)) (car data) "invalid JSON"))
         (line (and (integerp (nth 2 data)) (nth 2 data)))
         (column (and (integerp (nth 3 data)) (nth 3 data)))
         (first-line (line-number-at-pos content-start)))
    (if line
        (format "Invalid JSON in the tool-call block at line %d, column %d: %s"
                (+ first-line (max 0 (1- line))) (or column 0) what)
      (format "Invalid JSON in the tool-call block at line %d: %s" first-line what))))

(defun forj-tools-json-decode (text)
  "Decode JSON TEXT so that `forj-tools-json-encode' gives back the same JSON.
Objects become plists, arrays vectors, null `:null' and false `:false'."
  (json-parse-string text :object-type 'plist :array-type 'array
                     :null-object :null :false-object :false))

(defun forj-tools-json-encode (value)
  "Encode VALUE, as made by `forj-tools-json-decode', as JSON text."
  (json-serialize value :null-object :null :false-object :false))

(provide 'forj-tools)
;;; forj-tools.el ends here
