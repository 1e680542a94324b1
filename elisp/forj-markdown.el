;;; forj-markdown.el --- Minimal Markdown highlighting for chats  -*- lexical-binding: t; -*-

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

;; Models answer in Markdown.  When `markdown-mode' is installed, chats
;; are built on `gfm-mode' and it does the highlighting.  Without it,
;; `forj-markdown-setup' adds a small font-lock of forj's own to the
;; current buffer: headings, fenced code blocks (``` or ~~~) and
;; `inline code', plus **bold** and *emphasis*.  Nothing inside a code
;; block is taken for a heading or inline code, and text that already
;; has its own faces (a result forj drew in a file's major mode) keeps
;; them.

;;; Code:

(require 'font-lock)

(defface forj-markdown-heading
  '((t :inherit font-lock-function-name-face :weight bold))
  "Face for Markdown headings in a reply."
  :group 'forj)

(defface forj-markdown-code
  '((t :inherit font-lock-constant-face))
  "Face for the text of fenced code blocks and of inline code in a reply."
  :group 'forj)

(defface forj-markdown-fence
  '((t :inherit shadow))
  "Face for the fence lines of code blocks and the backquotes of inline code."
  :group 'forj)

(defface forj-markdown-bold
  '((t :inherit bold))
  "Face for **bold** text in a reply."
  :group 'forj)

(defface forj-markdown-italic
  '((t :inherit italic))
  "Face for *emphasized* text in a reply."
  :group 'forj)

(defconst forj-markdown--fence-re
  "^ \\{0,3\\}\\(`\\{3,\\}\\|~\\{3,\\}\\)\\([^`\n]*\\)$"
  "An opening or closing code fence; group 1 the fence, group 2 the info string.")

(defun forj-markdown--closing-fence (fence limit)
  "Find the line closing a block opened by FENCE, before LIMIT.
Return its end and set the match data to it, or return nil.  A
closing fence uses the same character, at least as many of them, and
has no info string."
  (let ((re (concat "^ \\{0,3\\}" (regexp-quote (substring fence 0 1))
                    "\\{" (number-to-string (length fence)) ",\\}[ \t]*$")))
    (re-search-forward re limit t)))

(defun forj-markdown--block-start (pos)
  "The start of the fenced block POS is in, or nil if it is in none.
The fences are counted from the start of the buffer."
  (save-excursion
    (save-match-data
      (goto-char (point-min))
      (let ((start nil))
        (while (and (< (point) pos) (re-search-forward forj-markdown--fence-re pos t))
          (let ((open (match-beginning 0))
                (fence (match-string 1)))
            (forward-line 1)
            (if (forj-markdown--closing-fence fence pos)
                (forward-line 1)
              (setq start open)
              (goto-char pos))))
        start))))

(defvar font-lock-beg)
(defvar font-lock-end)

(defun forj-markdown--extend-region ()
  "Start font-lock's region at the fence when it begins inside a code block.
Return non-nil if the region was changed."
  (let ((start (forj-markdown--block-start font-lock-beg)))
    (when (and start (< start font-lock-beg))
      (setq font-lock-beg start)
      t)))

(defun forj-markdown--match-block (limit)
  "Find the next fenced code block before LIMIT and set the match data to it.
Group 1 is the opening fence line, group 2 the text, group 3 the
closing fence line (absent while a block streams in, unclosed)."
  (when (re-search-forward forj-markdown--fence-re limit t)
    (let* ((open-beg (match-beginning 0))
           (open-end (match-end 0))
           (fence (match-string 1))
           (text-beg (min (1+ open-end) (point-max))))
      (goto-char text-beg)
      (if (forj-markdown--closing-fence fence nil)
          (let ((close-beg (line-beginning-position))
                (close-end (point)))
            (set-match-data (list open-beg close-end open-beg open-end
                                  text-beg close-beg close-beg close-end))
            (goto-char (min (1+ close-end) (point-max))))
        (set-match-data (list open-beg (point-max) open-beg open-end text-beg (point-max)))
        (goto-char (point-max)))
      t)))

(defun forj-markdown--code-face ()
  "The face for the text of the code block just matched, or nil.
Text that already has faces of its own (forj draws some results in
their file's major mode) keeps them."
  (let ((beg (match-beginning 2)) (end (match-end 2)))
    (list 'face (unless (or (= beg end)
                            (text-property-not-all beg end 'font-lock-face nil))
                  'forj-markdown-code)
          'forj-markdown-block t)))

(defun forj-markdown--outside-blocks (re)
  "A font-lock matcher for RE that skips code blocks."
  (lambda (limit)
    (let (found)
      (while (and (not found) (re-search-forward re limit t))
        (unless (get-text-property (match-beginning 0) 'forj-markdown-block)
          (setq found t)))
      found)))

(defconst forj-markdown--keywords
  `((forj-markdown--match-block
     (0 (forj-markdown--code-face) nil t)
     (1 'forj-markdown-fence t t)
     (3 'forj-markdown-fence t t))
    (,(forj-markdown--outside-blocks "^\\(#\\{1,6\\}\\)[ \t]+\\(.*\\)$")
     (1 'forj-markdown-fence)
     (2 'forj-markdown-heading))
    (,(forj-markdown--outside-blocks "\\(`+\\)\\([^`\n]+?\\)\\(\\1\\)")
     (1 'forj-markdown-fence)
     (2 'forj-markdown-code)
     (3 'forj-markdown-fence))
    (,(forj-markdown--outside-blocks "\\*\\*\\([^*\n]+\\)\\*\\*")
     (1 'forj-markdown-bold))
    (,(forj-markdown--outside-blocks "\\(?:^\\|[^*[:alnum:]]\\)\\*\\([^*\n ][^*\n]*\\)\\*\\(?:[^*[:alnum:]]\\|$\\)")
     (1 'forj-markdown-italic)))
  "What `forj-markdown-setup' highlights, code blocks first.
Later keywords do not override faces: nothing inside a block or inline
code is highlighted again.")

;;;###autoload
(defun forj-markdown-setup ()
  "Highlight Markdown headings, code blocks and inline code in this buffer.
For buffers without `markdown-mode'; the keywords come after the
buffer's own."
  (setq-local font-lock-multiline t)
  (add-to-list (make-local-variable 'font-lock-extra-managed-props) 'forj-markdown-block)
  (add-hook 'font-lock-extend-region-functions #'forj-markdown--extend-region nil t)
  (font-lock-add-keywords nil forj-markdown--keywords 'append)
  (when font-lock-mode (font-lock-flush)))

(provide 'forj-markdown)
;;; forj-markdown.el ends here
